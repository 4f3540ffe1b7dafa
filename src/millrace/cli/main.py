"""The `millrace` command: the root group, and how errors reach the terminal.

Each verb is a thin function in a sibling module that parses its options, calls one service
function of the layer below, and renders the result; the group imports a verb's module when
that verb runs, so the modules import at their top only what is cheap (a verb that needs
Spark, Delta or pandas imports them in its function). A `MillraceError` is printed as
`error[code]: message` with its hint, never with a traceback, and exits with status 1.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping

import click

from millrace.config.workspace import Workspace
from millrace.engine.disk_full import disk_full_on_write
from millrace.errors import MillraceError

# Where each verb is: `module` of this package, or `module:function` when the function's
# name is not the verb's.
_VERBS = {
    **dict.fromkeys(("init", "up", "down", "status", "demo"), "infra"),
    "stream": "streams",
    **dict.fromkeys(("publish", "tail", "pipe"), "records"),
    **dict.fromkeys(("check", "run", "query"), "apps"),
    "table": "tables",
    **dict.fromkeys(("archive", "backfill", "sql"), "warehouse"),
    **dict.fromkeys(
        ("deploy", "ps", "logs", "stop", "restart", "history", "rollback"), "lifecycle"
    ),
    **dict.fromkeys(("serve", "top"), "monitor"),
    "monitor": "monitor:monitor_",
}


class _Verbs(MutableMapping[str, click.Command]):
    """The verbs of `millrace`, each imported from its module when it is first looked up.

    A command runs after importing only its own verb's module: importing them all (pyarrow
    for the checkpoints of `ps`, Redis's client for `serve`...) took 0.5 s before any verb
    ran, twice what `millrace sql` takes to answer a small question. `--help` lists them all,
    and imports them all.
    """

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, _, function = _VERBS[name].partition(":")
            found = getattr(importlib.import_module(f"millrace.cli.{module}"), function or name)
            self._loaded[name] = found
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_VERBS.keys() | self._loaded.keys())

    def __len__(self) -> int:
        return len(_VERBS.keys() | self._loaded.keys())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="millrace")
def cli() -> None:
    """millrace: realtime data processing on Kafka and Spark.

    Settings come from the workspace's millrace.toml (.millrace/ here, or MILLRACE_HOME) and
    from MILLRACE_* environment variables.
    """


cli.commands = _Verbs()


def main() -> None:
    """Run the CLI, rendering millrace's own errors without a traceback."""
    try:
        cli.main(standalone_mode=False)
    except MillraceError as error:
        click.echo(error.render(), err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as error:
        full = disk_full_on_write(error, Workspace.locate())
        if full is None:
            raise
        click.echo(full.render(), err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
