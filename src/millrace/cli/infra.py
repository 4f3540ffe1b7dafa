"""CLI verbs for the workspace and local infrastructure: init, up, down, status, demo."""

from __future__ import annotations

import contextlib

import click

from millrace.bus.broker import broker_status, start_broker, stop_broker
from millrace.bus.streams import list_streams
from millrace.config.local_processes import loopback_port_is_free
from millrace.config.workspace import Workspace, init_workspace
from millrace.engine.local_cluster import cluster_status, start_cluster, stop_cluster
from millrace.errors import BusError, ConfigError, MillraceError, ServingError
from millrace.serving.server import redis_status, start_redis, stop_redis
from millrace.serving.tables import list_tables


@click.command()
@click.option("--force", is_flag=True, help="Overwrite an existing millrace.toml.")
def init(force: bool) -> None:
    """Create the workspace (.millrace/ or MILLRACE_HOME) with a commented millrace.toml."""
    workspace = Workspace.locate()
    if init_workspace(workspace, force=force):
        click.echo(f"created workspace {workspace.root}; settings in {workspace.config_file}")
    else:
        click.echo(
            f"workspace {workspace.root} exists; kept {workspace.config_file} "
            "(--force writes a fresh one)"
        )


@click.command()
@click.option(
    "--spark-workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also start a local Spark standalone master and this many workers (spark.* settings).",
)
def up(spark_workers: int) -> None:
    """Start the local Kafka broker and Redis, and wait until they accept clients.

    When Redis cannot start, a broker this command started is stopped again: either both
    run afterwards, or what ran before. With --spark-workers N, a local Spark cluster starts
    after them, for apps deployed with --master spark://127.0.0.1:PORT.
    """
    workspace = Workspace.locate().require_initialized()
    _require_free_redis_port(workspace)
    status = start_broker(workspace)
    if status.external:
        click.echo(
            f"bus: using the existing cluster at {status.bootstrap_servers} "
            "(kafka.bootstrap is set); no broker started"
        )
    elif status.started_now:
        click.echo(
            f"bus: Kafka broker started, listening on {status.bootstrap_servers} "
            f"(pid {status.pid}, data in {workspace.kafka_dir})"
        )
    else:
        click.echo(
            f"bus: Kafka broker already running on {status.bootstrap_servers} (pid {status.pid})"
        )
    try:
        _redis_up(workspace)
    except MillraceError as error:
        if status.started_now:
            stop_broker(workspace)
            left = (
                f"the Kafka broker this command started (pid {status.pid}) was stopped again; "
                "nothing is left running"
            )
        elif status.external:
            left = "no broker was started"
        else:
            left = f"the Kafka broker (pid {status.pid}), which ran before, keeps running"
        raise type(error)(f"{error.message}\n{left}", hint=error.hint) from None
    if spark_workers:
        cluster = start_cluster(workspace, spark_workers)
        click.echo(f"spark: local cluster running, {cluster.summary()}")


def _require_free_redis_port(workspace: Workspace) -> None:
    """Refuse before starting anything when the local Redis's port is taken."""
    settings = workspace.settings
    if not settings.uses_local_redis or redis_status(workspace).running:
        return
    if not loopback_port_is_free(settings.redis_port):
        raise ServingError(
            f"port {settings.redis_port} on 127.0.0.1 is in use by another process, so the "
            "local Redis cannot listen there; nothing was started",
            hint="stop that process, or choose a free port with redis.port in millrace.toml "
            "(or MILLRACE_REDIS_PORT)",
        )


def _redis_up(workspace: Workspace) -> None:
    status = start_redis(workspace)
    if status.external:
        click.echo(f"serving: using the existing Redis at {status.url} (redis.url is set)")
    elif status.started_now:
        click.echo(
            f"serving: Redis started, listening on {status.url} "
            f"(pid {status.pid}, data in {workspace.redis_dir})"
        )
    else:
        click.echo(f"serving: Redis already running on {status.url} (pid {status.pid})")


@click.command()
def down() -> None:
    """Stop the local Kafka broker, Redis and Spark cluster; their data stays in the workspace."""
    workspace = Workspace.locate()
    before = broker_status(workspace)
    stop_broker(workspace)
    if before.external:
        click.echo("bus: an existing cluster is configured (kafka.bootstrap); nothing to stop")
    elif before.running:
        click.echo(f"bus: Kafka broker stopped (was pid {before.pid})")
    else:
        click.echo("bus: no local broker was running")
    serving = redis_status(workspace)
    stop_redis(workspace)
    if serving.external:
        click.echo("serving: an existing Redis is configured (redis.url); nothing to stop")
    elif serving.running:
        click.echo(f"serving: Redis stopped (was pid {serving.pid})")
    else:
        click.echo("serving: no local Redis was running")
    cluster = stop_cluster(workspace)
    if cluster is not None:
        click.echo(f"spark: local cluster stopped (was {cluster.summary()})")


@click.command()
def status() -> None:
    """Show the workspace and whether the bus, the serving store and a local cluster run."""
    workspace = Workspace.locate()
    click.echo(
        f"workspace: {workspace.root}"
        + ("" if workspace.config_file.exists() else " (not created: run `millrace init`)")
    )
    current = broker_status(workspace)
    if current.external:
        try:
            count = len(list_streams(workspace.settings))
            click.echo(
                f"bus: existing cluster at {current.bootstrap_servers}, reachable, {count} streams"
            )
        except BusError:
            click.echo(f"bus: existing cluster at {current.bootstrap_servers}, NOT reachable")
    elif current.running:
        click.echo(
            f"bus: local Kafka broker running on {current.bootstrap_servers} (pid {current.pid})"
        )
    else:
        click.echo("bus: local Kafka broker not running (start it with `millrace up`)")
    serving = redis_status(workspace)
    if serving.external or serving.running:
        where = (
            f"existing Redis at {serving.url}"
            if serving.external
            else f"local Redis running on {serving.url} (pid {serving.pid})"
        )
        try:
            count = len(list_tables(workspace.settings))
            click.echo(f"serving: {where}, reachable, {count} tables")
        except ServingError:
            click.echo(f"serving: {where}, NOT reachable")
    else:
        click.echo("serving: local Redis not running (start it with `millrace up`)")
    cluster = cluster_status(workspace)
    if cluster is not None:
        click.echo(f"spark: local cluster running, {cluster.summary()}")


@click.command()
@click.option("--rate", default=200.0, show_default=True, help="Events per second to publish.")
@click.option(
    "--seconds",
    type=float,
    default=None,
    help="Stop after this many seconds (exit 1 if no top-K appeared); default: until Ctrl-C.",
)
@click.option(
    "--dashboard-port",
    default=8321,
    show_default=True,
    help="Serve the dashboard on this loopback port while the demo runs (0: do not).",
)
@click.option(
    "--isolated",
    is_flag=True,
    help="Run each app in a Spark application of its own instead of the workspace's host.",
)
def demo(rate: float, seconds: float | None, dashboard_port: int, isolated: bool) -> None:
    """Run the trending-events pipeline live: generator, 4 apps, top 3 events per topic."""
    from millrace.api.app import background_service
    from millrace.cli.demo import run_demo

    workspace = Workspace.locate()
    init_workspace(workspace)
    with contextlib.ExitStack() as dashboard:
        try:
            if dashboard_port:
                url = dashboard.enter_context(
                    background_service(workspace, host="127.0.0.1", port=dashboard_port)
                )
                click.echo(f"dashboard: {url}/ui/ (the pipeline live in a browser)")
        except ConfigError as error:
            click.echo(f"no dashboard: {error.message}; pass --dashboard-port N")
        run = run_demo(workspace, rate=rate, seconds=seconds, say=click.echo, hosted=not isolated)
    if seconds is not None and run.first_results_s is None:
        raise SystemExit(1)
