"""The `millrace` command: the root group, and how errors reach the terminal.

Each verb is a thin function in a sibling module that parses its options, calls one service
function of the layer below, and renders the result. A `MillraceError` is printed as
`error[code]: message` with its hint, never with a traceback, and exits with status 1.
"""

from __future__ import annotations

import sys

import click

# Every verb's module is imported to list it in --help, so the modules import at their top
# only what is cheap: a verb that needs Spark, Delta, pandas or the SQL compiler imports them
# when it runs (in its function, with the runtime modules it calls), and `--help`, `status`,
# `tail`, `publish` and `ps` answer without loading them.
from millrace.cli import apps, infra, lifecycle, monitor, records, streams, tables, warehouse
from millrace.config.workspace import Workspace
from millrace.engine.disk_full import disk_full_on_write
from millrace.errors import MillraceError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="millrace")
def cli() -> None:
    """millrace: realtime data processing on Kafka and Spark.

    Settings come from the workspace's millrace.toml (.millrace/ here, or MILLRACE_HOME) and
    from MILLRACE_* environment variables.
    """


for command in (
    infra.init,
    infra.up,
    infra.down,
    infra.status,
    infra.demo,
    streams.stream,
    records.publish,
    records.tail,
    records.pipe,
    apps.check,
    apps.run,
    apps.query,
    tables.table,
    warehouse.archive,
    warehouse.backfill,
    warehouse.sql,
    lifecycle.deploy,
    lifecycle.ps,
    lifecycle.logs,
    lifecycle.stop,
    lifecycle.restart,
    lifecycle.history,
    lifecycle.rollback,
    monitor.serve,
    monitor.top,
    monitor.monitor_,
):
    cli.add_command(command)


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
