"""CLI verbs for watching apps: `millrace serve`, `millrace top` and `millrace monitor`."""

from __future__ import annotations

import logging
import threading
import time

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from millrace.config.workspace import Workspace
from millrace.monitor.service import Monitor
from millrace.monitor.status import AppStatus


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8321, show_default=True, help="Port to listen on.")
@click.option(
    "--token",
    envvar="MILLRACE_API_TOKEN",
    help="Bearer token every request must carry; required to listen beyond loopback "
    "[env: MILLRACE_API_TOKEN].",
)
def serve(host: str, port: int, token: str | None) -> None:
    """Serve /metrics (Prometheus), /streams, /apps and /alerts over HTTP, and check alerts."""
    # FastAPI loads only for this verb.
    from millrace.api.app import check_binding
    from millrace.api.app import serve as run_service

    check_binding(host, token)
    _log_to_stderr()
    workspace = Workspace.locate().require_initialized()
    click.echo(f"serving on http://{host}:{port} (OpenAPI at /docs); Ctrl-C stops", err=True)
    run_service(workspace, host=host, port=port, token=token)


@click.command()
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between frames.")
def top(once: bool, interval: float) -> None:
    """A live view of the apps: input rate, cost, processing lag, watermark lags, last batch.

    The cost is the micro-batches each app ran in the last minute and the CPU seconds its
    driver used in the last minute, with the share of one core that is.
    """
    monitor = Monitor(Workspace.locate().require_initialized())
    console = Console()
    if once:
        console.print(apps_table(monitor.statuses(fresh=True)))
        return
    stop = threading.Event()
    alerts = threading.Thread(target=monitor.run_alerts, args=(stop,), daemon=True)
    alerts.start()
    try:
        with Live(apps_table(monitor.statuses(fresh=True)), console=console) as live:
            while True:
                time.sleep(interval)
                live.update(apps_table(monitor.statuses(fresh=True)))
    finally:
        stop.set()


@click.command(name="monitor")
@click.option("--once", is_flag=True, help="Evaluate the alert rules once and exit.")
def monitor_(once: bool) -> None:
    """Evaluate the alert rules of millrace.toml, log alerts and post them to the webhook."""
    _log_to_stderr()
    monitor = Monitor(Workspace.locate().require_initialized())
    if not monitor.alerts.rules:
        click.echo("no [[alerts]] rules in millrace.toml; see docs/monitoring.md", err=True)
    if once:
        for alert in monitor.evaluate_alerts():
            click.echo(f"{alert.state}: {alert.message}")
        return
    click.echo(
        f"checking {len(monitor.alerts.rules)} rules every "
        f"{monitor.workspace.settings.monitor_interval_s:g} s; Ctrl-C stops",
        err=True,
    )
    monitor.run_alerts(threading.Event())


def apps_table(statuses: list[AppStatus]) -> Table:
    """The table `top` shows: one row per app."""
    now_ms = int(time.time() * 1000)
    table = Table(title="millrace apps", title_justify="left")
    # An app's name is never cut short on a narrow terminal: the figures' headings wrap.
    longest_name = max((len(status.name) for status in statuses), default=3)
    table.add_column("app", min_width=longest_name, no_wrap=True)
    table.add_column("activity")
    columns = ("in rows/s", "batches/min", "driver cpu/min", "lag records", "lag s")
    for column in (*columns, "latency s", "watermark lag s"):
        table.add_column(column, justify="right")
    table.add_column("out watermark")
    table.add_column("behind source s", justify="right")
    table.add_column("held back by")
    table.add_column("future-dated", justify="right")
    table.add_column("last batch", justify="right")
    for status in statuses:
        watermark_lag = status.watermark_lag_seconds
        behind = status.watermark_behind_source_seconds
        if status.last_batch_ms is None:
            last = "-"
        else:
            last = f"#{status.last_batch_id} {(now_ms - status.last_batch_ms) / 1000:.0f}s ago"
        table.add_row(
            status.name,
            status.activity,
            f"{status.input_rows_per_second:.1f}",
            str(status.batches_last_minute),
            "-" if status.driver_cpu is None else status.driver_cpu.described,
            str(status.lag_records),
            f"{status.lag_seconds:.1f}",
            "-" if status.latency is None else status.latency.pair,
            "-" if watermark_lag is None else f"{watermark_lag:.1f}",
            _clock(status.output_watermark_ms),
            "-" if behind is None else f"{behind:.1f}",
            _held_back_by(status),
            str(sum(watermark.future_dated for watermark in status.watermarks)),
            last,
        )
    if not statuses:
        table.caption = "no apps yet: an app appears once it has run a batch"
    return table


def _clock(time_ms: int | None) -> str:
    """`time_ms` as the UTC time of day, to the millisecond, or `-`."""
    if time_ms is None:
        return "-"
    return time.strftime("%H:%M:%S", time.gmtime(time_ms / 1000)) + f".{time_ms % 1000:03d}"


def _held_back_by(status: AppStatus) -> str:
    """The bucket holding each input's watermark back, as `stream/bucket`."""
    held = [
        f"{watermark.stream}/{watermark.held_back_by}"
        for watermark in status.watermarks
        if watermark.held_back_by is not None
    ]
    return ", ".join(held) or "-"


def _log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
