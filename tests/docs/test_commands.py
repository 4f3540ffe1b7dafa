"""Every `millrace` command the docs show is one the CLI accepts, so the pages cannot drift.

A command in a code block must parse as written: its verb, its options, their values and its
arguments (nothing runs). A command quoted in the prose may be a synopsis (`millrace stop APP
[--timeout S]`), so there its verb and each option it names must exist.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from millrace.cli.main import cli

DOCS = Path(__file__).parents[2] / "docs"
# docs/cli.md is generated from the CLI's help and checked by tests/cli/test_reference.py.
PAGES = sorted(page for page in DOCS.glob("*.md") if page.name != "cli.md")
_COMMAND_START = re.compile(r"^(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?millrace(?: |$)")


def _block_commands(text: str) -> list[list[str]]:
    """The argument lists of the millrace commands in a page's code blocks."""
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.DOTALL):
        lines = block.replace("\\\n", " ").splitlines()
        while lines:
            line = lines.pop(0)
            if not _COMMAND_START.match(line):
                continue
            # A quoted SQL statement may span lines: read on until the quotes close.
            while True:
                try:
                    words = shlex.split(line, comments=True)
                    break
                except ValueError:
                    line += "\n" + lines.pop(0)
            words = [word for word in words if word not in ("$", "&")]
            while "=" in words[0]:
                words.pop(0)
            commands.append(words[1:])
    return commands


def _prose_commands(text: str) -> list[str]:
    """The millrace commands quoted in a page's prose, synopses included."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.findall(r"`(?:\.venv/bin/)?millrace ([^`]*)`", prose)


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command that `words` names, and the words left for it."""
    command: click.Command = cli
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command, words = command.commands[words[0]], words[1:]
    return command, words


def _parse(words: list[str]) -> None:
    """Parse `words` as `millrace` does: each command's context a child of its group's.

    A command's context made without its group's would not take the group's settings (`-h`
    for help), and Click keeps the help option that a command's first context makes: `millrace
    ... -h` run later in the same process would then be refused.
    """
    parent: click.Context | None = None
    name, command = "millrace", cli
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        parent = click.Context(command, parent=parent, info_name=name, **command.context_settings)
        name, command, words = words[0], command.commands[words[0]], words[1:]
    command.make_context(name, words, parent=parent)


def _option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for parameter in command.params:
        if isinstance(parameter, click.Option):
            names.update(parameter.opts + parameter.secondary_opts)
    return names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_in_a_code_block_parses_as_written(page: Path) -> None:
    for words in _block_commands(page.read_text()):
        command, _ = _resolve(words)
        assert command is not cli, f"{page.name}: `millrace {shlex.join(words)}` names no command"
        try:
            _parse(words)
        except click.UsageError as error:
            pytest.fail(f"{page.name}: `millrace {shlex.join(words)}` does not parse: {error}")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_quoted_in_prose_names_a_verb_and_options_that_exist(page: Path) -> None:
    for quoted in _prose_commands(page.read_text()):
        command, rest = _resolve(quoted.split())
        assert command is not cli, f"{page.name}: `millrace {quoted}` names no command"
        named_options = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", " ".join(rest)))
        unknown = named_options - _option_names(command)
        assert not unknown, f"{page.name}: `millrace {quoted}`: no option {sorted(unknown)}"


def test_checking_a_command_leaves_the_cli_as_users_run_it() -> None:
    _parse(["table", "get", "classifications", "d1"])

    shown = CliRunner().invoke(cli, ["table", "get", "-h"])
    assert shown.exit_code == 0, shown.output
    assert "-h, --help" in shown.output


def test_the_pages_show_commands_to_check() -> None:
    shown = sum(len(_block_commands(page.read_text())) for page in PAGES)
    quoted = sum(len(_prose_commands(page.read_text())) for page in PAGES)
    assert shown >= 40 and quoted >= 40, (shown, quoted)
