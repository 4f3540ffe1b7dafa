"""The runner: an app's driver, streaming until it is stopped, or once over a range.

Every streaming run of an app goes through `stream`: `millrace run` in a terminal, and the
process `deploy` starts for a deployed app (`millrace.ops.deployed`), which the demo
deploys. A run is the app's one driver (`millrace.ops.driver_lock`): it holds the app's
driver lock, moves the checkpoint aside with `fresh`, and checks the start
(`millrace.ops.lifecycle.check_start`) and its input streams on the bus before Spark
starts. It then says a line per micro-batch (`millrace.apps.progress_lines`) and, on
SIGTERM (`millrace stop`, a service manager) or Ctrl-C, lets each query finish its running
micro-batch (`stop_gracefully`), stops, and says what the run read and wrote. `run_batch`
runs an app once over an event-time range of the bus, after the same look at the bus. Both
take the process's SparkSession for the run (`command_session`): one they started is stopped
at the end.

`stop_requests` is the stop signal handling that runs and the demo share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator

from pyspark.sql.streaming import StreamingQuery

from millrace.apps.app import App, BatchResult
from millrace.apps.progress_lines import ProgressLines
from millrace.apps.state_schema import record_state
from millrace.config.workspace import Workspace
from millrace.engine.session import command_session
from millrace.engine.triggers import Trigger
from millrace.ops import checkpoints, driver_lock, lifecycle

GRACE_S = 60.0
"""How long a stopping app waits for a query to be between micro-batches before stopping it."""

_PROGRESS_EVERY_S = 2.0
_IDLE_POLL_S = 0.05


def stream(
    workspace: Workspace,
    app: App,
    *,
    trigger: Trigger | None = None,
    force: bool = False,
    fresh: bool = False,
    say: Callable[[str], None] = print,
) -> None:
    """Run `app`'s streaming queries until they end or the process is asked to stop.

    Raises `AppRunningError` when another driver runs the app, and what `check_start` raises;
    with `force` the state's fingerprint is not compared, with `fresh` the app starts over
    (`lifecycle.start_over`). `say` gets the lines to print.
    """
    lock = driver_lock.hold(workspace, app.name, source=app.source)
    try:
        if fresh:
            moved = lifecycle.start_over(workspace, app.name)
            if moved is not None:
                say(f"starting over: the checkpoint was moved to {moved}")
        lifecycle.check_start(workspace, app, force=force)
        app.require_inputs(workspace)
        try:
            _drive(workspace, app, trigger, say)
        finally:
            checkpoints.remember(workspace, app.name)
    finally:
        lock.release()


def run_batch(workspace: Workspace, app: App, *, start_ms: int, end_ms: int) -> BatchResult:
    """Run `app` once over its inputs' records on the bus from `start_ms` up to `end_ms`."""
    app.require_inputs(workspace)
    with command_session(workspace.settings, app.name) as spark:
        return app.run_batch(spark, workspace, start_ms=start_ms, end_ms=end_ms)


def on_master(workspace: Workspace, master: str | None) -> Workspace:
    """`workspace` with its Spark master replaced by `master`, when one is given (`--master`).

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> on_master(workspace, "spark://127.0.0.1:7077").settings.spark_master
        'spark://127.0.0.1:7077'
    """
    if master is None:
        return workspace
    return dataclasses.replace(
        workspace, settings=dataclasses.replace(workspace.settings, spark_master=master)
    )


@contextlib.contextmanager
def stop_requests() -> Iterator[threading.Event]:
    """An event set when the process gets SIGTERM, as `millrace stop` and service managers send.

    Ctrl-C stays a `KeyboardInterrupt`, which interrupts whatever runs (a start of Spark
    too). The handler that was there before is put back at the end.

    Example:
        >>> import os
        >>> with stop_requests() as stopping:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     stopping.wait(5)
        True
    """
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    try:
        yield stopping
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_gracefully(queries: list[StreamingQuery], timeout_s: float = GRACE_S) -> None:
    """Stop each query between two micro-batches: once it runs no trigger, or at `timeout_s`.

    Spark's `stop` cancels a micro-batch in flight (it runs again at the next start, so
    nothing is lost, but its work is); this waits for the moment a query is between two
    micro-batches. A micro-batch that starts in the instant between the look and the stop
    is cancelled as by `stop`.
    """
    deadline = time.monotonic() + timeout_s
    for query in queries:
        while query.isActive and time.monotonic() < deadline:
            if not query.status["isTriggerActive"]:
                break
            time.sleep(_IDLE_POLL_S)
        query.stop()


def _drive(
    workspace: Workspace, app: App, trigger: Trigger | None, say: Callable[[str], None]
) -> None:
    """Start the app on the command's session; say its progress until it ends or is stopped."""
    # Installed before Spark starts, which takes the longest: a stop then waits for no batch.
    with stop_requests() as stopping, command_session(workspace.settings, app.name) as spark:
        try:
            running = app.start(spark, workspace, trigger)
            record_state(workspace, app.name, app.fingerprint)
            say(running.started)
            lines = ProgressLines(app.name)
            try:
                while any(query.isActive for query in running.queries) and not stopping.is_set():
                    if lines.say_new(running.queries, say):
                        checkpoints.remember(workspace, app.name)
                    stopping.wait(_PROGRESS_EVERY_S)
            except KeyboardInterrupt:
                stopping.set()
            if stopping.is_set():
                say(running.stopping)
                stop_gracefully(running.queries)
                running.stop()
            else:
                running.await_termination()
            # The last batches may have ended after the last look: their lines give the totals.
            lines.say_new(running.queries, say)
            for line in running.summary(lines.totals):
                say(line)
            if stopping.is_set():
                say("stopped")
        except KeyboardInterrupt:
            say("stopping...")
