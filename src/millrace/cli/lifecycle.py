"""CLI verbs for deployed apps: deploy, ps, logs, stop, restart, history, rollback."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Literal

import click

from millrace.apps.options import RunOptions
from millrace.cli.times import epoch_ms
from millrace.config.proc_stat import process_tree, resident_mib
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import CheckpointError, MillraceError
from millrace.monitor.service import Monitor
from millrace.ops import checkpoints, registry
from millrace.ops.registry import AppRecord
from millrace.records import format_time_ms

_FOLLOW_POLL_S = 0.5


def _workspace() -> Workspace:
    return Workspace.locate().require_initialized()


def _trigger(text: str | None) -> Trigger | None:
    return Trigger.parse(text) if text is not None else None


@click.command()
@click.argument("app")
@click.option(
    "--trigger", help="micro-batch (default), interval:10s, available-now, real-time[:5m]."
)
@click.option("--master", help="Spark master URL, such as spark://127.0.0.1:7077.")
@click.option("--force", is_flag=True, help="Start even if the state schema looks incompatible.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Start over: move the checkpoint under <workspace>/apps/APP/backups/ first "
    "(<storage.root>/backups/APP/ when storage.root is set).",
)
@click.option(
    "--host/--isolated",
    "hosted",
    default=True,
    help="Run in the workspace's host, one Spark application for many apps (started if none "
    "runs; the default), or in a Spark application of its own (as do the apps the "
    "deploy.isolated setting names).",
)
def deploy(
    app: str, trigger: str | None, master: str | None, force: bool, fresh: bool, hosted: bool
) -> None:
    """Start APP detached, in the workspace's host or as its own Spark application, and record it.

    APP is a SQL app's file, or a processor as module:Class or path/to/file.py:Class.
    Refused while the app runs (deployed, or in a terminal with `millrace run`), and when
    queries of it that ran before have lost their checkpoints (--fresh starts over).
    """
    from millrace.ops import lifecycle

    options = RunOptions(_trigger(trigger) or Trigger(), master, force, hosted)
    record = lifecycle.deploy(_workspace(), app, options, fresh=fresh)
    where = f"in the host, pid {record.pid}" if record.options.hosted else f"pid {record.pid}"
    click.echo(f"app {record.name!r} deployed: {where}, log {record.log}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per app.")
def ps(as_json: bool) -> None:
    """List the deployed apps: status, pid, driver, uptime, trigger, last batch, rate, cost, lags.

    The driver is `own` for an app in a Spark application of its own, `host` for one in the
    workspace's host, whose pid it shows; its memory is what the driver's processes (Python,
    Spark's JVM and Python workers) hold now, for the host's apps the host's, which they
    share.

    The cost is the micro-batches the app ran in the last minute and the CPU seconds its
    driver (Python, Spark's JVM and Python workers) used in the last minute, with the share
    of one core that is; for an app in the host, what it used on its own (its tasks, its
    micro-batch loops) and its part, in proportion, of what the host's apps share.

    The processing lag is the records waiting on the app's inputs and how many seconds of
    the bus they span; the watermark lag how far its watermark is behind its newest event
    time; the output watermark the one it last published to the streams it writes; behind
    source how far its watermark trails its pipeline's sources' (see docs/monitoring.md).
    """
    workspace = _workspace()
    monitor = Monitor(workspace)
    problems: list[MillraceError] = []
    records = registry.list_apps(workspace)
    drivers = {record.pid for record in records if record.status == "running" and record.pid}
    memory = {pid: f"{resident_mib(process_tree(pid)):,.0f} MiB" for pid in drivers}
    rows = [
        _ps_row(workspace, record, monitor, problems, memory.get(record.pid or 0))
        for record in records
    ]
    try:
        _print_ps(rows, as_json)
    finally:
        # An app whose checkpoint cannot be read is listed; what is wrong comes after.
        for problem in problems:
            click.echo(problem.render(), err=True)
    if problems:
        sys.exit(1)


def _print_ps(rows: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    if not rows:
        click.echo("no deployed apps; start one with `millrace deploy APP`")
        return
    columns: tuple[str, ...] = ("app", "status", "pid", "driver", "driver_memory", "uptime")
    columns += ("trigger", "last_batch")
    columns += ("last_batch_at", "input_rate", "batches_per_min", "driver_cpu_per_min")
    columns += ("processing_lag", "latency", "watermark_lag")
    columns += ("output_watermark", "behind_source")
    table = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [
        max(len(column), *(len(line[i]) for line in table)) for i, column in enumerate(columns)
    ]
    for line in [[column.upper() for column in columns], *table]:
        cells = zip(line, widths, strict=True)
        click.echo("  ".join(cell.ljust(width) for cell, width in cells).rstrip())


@click.command()
@click.argument("app")
@click.option("-f", "--follow", is_flag=True, help="Keep printing what the app writes.")
@click.option("-n", "--lines", type=int, default=50, show_default=True, help="Last lines to show.")
def logs(app: str, follow: bool, lines: int) -> None:
    """Print the log of deployed app APP (its output and Spark's warnings)."""
    record = registry.load(_workspace(), app)
    path = Path(record.log)
    if not path.is_file():
        click.echo(f"no log yet at {path}")
        return
    with path.open(encoding="utf-8", errors="replace") as log:
        for line in log.readlines()[-lines:] if lines > 0 else []:
            click.echo(line, nl=False)
        while follow:
            line = log.readline()
            if line:
                click.echo(line, nl=False)
                continue
            if path.stat().st_size < log.tell():
                log.seek(0)  # rotated: its lines so far were moved to app.log.1
            time.sleep(_FOLLOW_POLL_S)


@click.command()
@click.argument("app")
@click.option(
    "--timeout",
    type=float,
    default=registry.STOP_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for the running micro-batch before killing the app.",
)
def stop(app: str, timeout: float) -> None:
    """Stop deployed app APP gracefully: its running micro-batch finishes first."""
    from millrace.ops import lifecycle

    record = lifecycle.stop(_workspace(), app, timeout_s=timeout)
    click.echo(f"app {record.name!r} {record.status}")


@click.command()
@click.argument("app")
@click.option("--source", help="Run this source instead of the recorded one (same app name).")
@click.option("--trigger", help="A new trigger; default: the one it ran with.")
@click.option("--master", help="A new Spark master URL; default: the one it ran with.")
@click.option("--fresh", is_flag=True, help="Move the checkpoint aside and start over.")
@click.option(
    "--from",
    "start_from",
    help="With --fresh: earliest (default), latest, or a time (ISO-8601 or epoch ms).",
)
@click.option("--force", is_flag=True, help="Start even if the state schema looks incompatible.")
def restart(
    app: str,
    source: str | None,
    trigger: str | None,
    master: str | None,
    fresh: bool,
    start_from: str | None,
    force: bool,
) -> None:
    """Stop APP and start it again with its (new) code, resuming from its checkpoint.

    With --fresh, the checkpoint (offsets and state) is moved under
    <workspace>/apps/APP/backups/ (<storage.root>/backups/APP/ when storage.root is set) and
    the app starts over, reading its inputs from --from.
    """
    from millrace.ops import lifecycle

    if start_from is not None and not fresh:
        raise click.UsageError("--from goes with --fresh")
    where: Literal["earliest", "latest"] | int
    if not start_from or start_from == "earliest":
        where = "earliest"
    elif start_from == "latest":
        where = "latest"
    else:
        where = epoch_ms("--from", start_from)
    workspace = _workspace()
    before = registry.load(workspace, app)
    record = lifecycle.restart(
        workspace,
        app,
        source=source,
        trigger=_trigger(trigger),
        master=master,
        fresh=fresh,
        start_from=where,
        force=force,
    )
    changed = "new code" if record.source_hash != before.source_hash else "same code"
    resumed = "from scratch" if fresh else "from its checkpoint"
    click.echo(f"app {record.name!r} restarted ({changed}, {resumed}): pid {record.pid}")


@click.command()
@click.argument("app")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch.")
def history(app: str, as_json: bool) -> None:
    """List the batches of APP from its checkpoints' write-ahead log: offsets and times."""
    batches = checkpoints.history(_workspace(), app)
    if not batches:
        click.echo(f"app {app!r} has no batches in its checkpoints yet")
    for batch in batches:
        row = batch.as_dict()
        if as_json:
            click.echo(json.dumps(row))
            continue
        committed = row["committed"] or "not committed"
        click.echo(
            f"{row['query']}  batch {row['batch']}  started {row['started']}  "
            f"committed {committed}  offsets {json.dumps(row['offsets'])}"
        )


@click.command()
@click.argument("app")
@click.option("--to-batch", type=int, help="The last batch to keep.")
@click.option("--to-time", help="Keep the batches committed up to this time (ISO-8601 or epoch).")
@click.option("--no-start", is_flag=True, help="Leave the app stopped after the rollback.")
def rollback(app: str, to_batch: int | None, to_time: str | None, no_start: bool) -> None:
    """Stop APP, move its checkpoints back to a batch, and start it to recompute from there.

    What is removed is kept under <workspace>/apps/APP/backups/ (<storage.root>/backups/APP/
    when storage.root is set), log files that cannot be read included. An app run in a
    terminal (never deployed) is rolled back and left stopped.
    """
    if (to_batch is None) == (to_time is None):
        raise click.UsageError("give --to-batch N or --to-time TIME")
    from millrace.ops import lifecycle

    done = lifecycle.rollback(
        _workspace(),
        app,
        to_batch=to_batch,
        to_time_ms=epoch_ms("--to-time", to_time) if to_time is not None else None,
        start=not no_start,
    )
    for query, batch_id in sorted(done.rollback.to_batch.items()):
        removed = done.rollback.removed_batches.get(query, [])
        click.echo(f"{query}: back to batch {batch_id}, {len(removed)} later batches removed")
    if not done.rollback.to_batch:
        click.echo("nothing to roll back: no query is past that point")
    click.echo(f"backup: {done.rollback.backup}")
    if done.record is not None:
        click.echo(f"app {app!r} started again: pid {done.record.pid}")
    elif not no_start:
        click.echo(f"app {app!r} is not deployed: `millrace run` starts it from there")


def _ps_row(
    workspace: Workspace,
    record: AppRecord,
    monitor: Monitor,
    problems: list[MillraceError],
    driver_memory: str | None,
) -> dict[str, object]:
    """What `ps` shows of one app. Lags are the monitor's (`millrace.monitor`).

    An app whose checkpoint cannot be read shows no last batch; its error joins `problems`.
    """
    try:
        last = checkpoints.last_batches(workspace, record.name)
    except CheckpointError as error:
        problems.append(error)
        last = {}
    newest = max(last.values(), key=lambda batch: batch.started_ms or 0, default=None)
    uptime = registry.uptime_s(record)
    return {
        "app": record.name,
        "kind": record.kind,
        "status": record.status,
        "pid": record.pid if record.status == "running" else None,
        "driver": "host" if record.options.hosted else "own",
        "driver_memory": driver_memory,
        "uptime": _duration(uptime) if uptime is not None else None,
        "trigger": record.trigger,
        "last_batch": {query: batch.batch_id for query, batch in last.items()} or None,
        "last_batch_at": newest.as_dict()["started"] if newest is not None else None,
        "input_rate": _input_rate(record),
        **_lags(monitor, record.name),
    }


def _lags(monitor: Monitor, app: str) -> dict[str, object]:
    """The cost, the lags and the output watermark of `app`; None where the monitor cannot tell.

    Per input, too, the event time each bucket has reached and the bucket holding the input's
    watermark back. `ps` still lists the apps when the bus is down: the lags are then left out.
    """
    try:
        status = monitor.status(app)
    except MillraceError:
        status = None
    if status is None:
        return {
            "batches_per_min": None,
            "driver_cpu_per_min": None,
            "processing_lag": None,
            "latency": None,
            "watermark_lag": None,
            "output_watermark": None,
            "behind_source": None,
            "watermarks": None,
        }
    watermark_lag = status.watermark_lag_seconds
    behind = status.watermark_behind_source_seconds
    output = status.output_watermark_ms
    return {
        "batches_per_min": status.batches_last_minute,
        "driver_cpu_per_min": None if status.driver_cpu is None else status.driver_cpu.described,
        "processing_lag": f"{status.lag_records} records, {status.lag_seconds:.1f}s",
        "latency": None if status.latency is None else status.latency.described,
        "watermark_lag": None if watermark_lag is None else f"{watermark_lag:.1f}s",
        "output_watermark": None if output is None else format_time_ms(output),
        "behind_source": None if behind is None else f"{behind:.1f}s",
        "watermarks": {
            watermark.stream: {
                "held_back_by_bucket": watermark.held_back_by,
                "bucket_event_times": {
                    bucket: format_time_ms(time_ms)
                    for bucket, time_ms in watermark.progress_ms.items()
                },
                "recent_future_dated": watermark.future_dated,
            }
            for watermark in status.watermarks
        },
    }


def _input_rate(record: AppRecord) -> float | None:
    """Rows per second of the app's last progress lines, as `millrace run` logs them."""
    path = Path(record.log)
    if record.status != "running" or not path.is_file():
        return None
    rates: dict[str, float] = {}
    with path.open(encoding="utf-8", errors="replace") as log:
        log.seek(max(0, path.stat().st_size - 16_384))
        for line in log.read().splitlines():
            query, _, rest = line.partition(": batch ")
            if rest and "/s)" in rest:
                rates[query] = float(rest.split("(", 1)[1].split("/s)", 1)[0])
    return round(sum(rates.values()), 1) if rates else None


def _duration(seconds: float) -> str:
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}h{minute:02d}m" if hours else f"{minute}m{second:02d}s"


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{key}={item}" for key, item in value.items())
    return str(value)
