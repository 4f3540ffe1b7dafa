"""The CLI reference page, docs/cli.md, rendered from the commands' own help.

The page is generated so that it cannot drift from the code: `tests/cli/test_reference.py`
fails when docs/cli.md differs from what `render()` gives, and
`.venv/bin/python -m millrace.cli.reference > docs/cli.md` writes it again.

Example:
    >>> render().splitlines()[0]
    '# CLI reference'
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from millrace.cli.main import cli

_WIDTH = 100
_INTRODUCTION = """# CLI reference

Every `millrace` command and its options, as `millrace COMMAND --help` prints them. This page
is generated from the commands themselves (`.venv/bin/python -m millrace.cli.reference >
docs/cli.md`), and a test checks that it is up to date. Settings that every command reads
(workspace, broker, Redis, Spark) come from `millrace.toml` and `MILLRACE_*` variables; see
the README.
"""


def render() -> str:
    """The whole reference page, as markdown."""
    sections = [_INTRODUCTION]
    for path, command in _commands(cli, ["millrace"]):
        sections.append(f"## {' '.join(path)}\n\n```text\n{_help(command, path)}\n```\n")
    return "\n".join(sections)


def _commands(command: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from _commands(command.commands[name], [*path, name])


def _help(command: click.Command, path: list[str]) -> str:
    context = click.Context(command, info_name=" ".join(path), terminal_width=_WIDTH)
    return command.get_help(context).rstrip()


if __name__ == "__main__":
    print(render(), end="")
