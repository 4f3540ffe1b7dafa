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
    top = click.Context(cli, info_name="millrace", terminal_width=_WIDTH, **cli.context_settings)
    for path, context in _contexts(top, ["millrace"]):
        help_text = context.command.get_help(context).rstrip()
        sections.append(f"## {' '.join(path)}\n\n```text\n{help_text}\n```\n")
    return "\n".join(sections)


def _contexts(context: click.Context, path: list[str]) -> Iterator[tuple[list[str], click.Context]]:
    """Each command from `context`'s down, each with a context made as `millrace` makes it.

    A command's context is a child of its group's, so that it takes the group's settings
    (`-h` for help) as it does when run, whether or not the CLI has run in this process.
    """
    yield path, context
    if isinstance(context.command, click.Group):
        for name in sorted(context.command.commands):
            child = click.Context(context.command.commands[name], parent=context, info_name=name)
            yield from _contexts(child, [*path, name])


if __name__ == "__main__":
    print(render(), end="")
