"""The runner: an app's driver, streaming until it is stopped, or once over a range.

`drive` runs an app's streaming queries on the process's SparkSession (`command_session`):
for `millrace run` in a terminal and for the process `deploy` starts (both through
`millrace.ops`, which holds the app's driver lock and checks the start first), so for the
demo's apps too. It says a line per micro-batch (`millrace.apps.progress_lines`) and, on
SIGTERM (`millrace stop`, a service manager) or Ctrl-C, lets each query finish its running
micro-batch (`stop_gracefully`), stops, and says what the run read and wrote. `run_batch`
runs an app once over an event-time range of the bus, after a look at the bus. A session the
runner started is stopped at the end.

`drive_on` is `drive` on a given session and stop signal, as a host runs each of its apps.
`stop_requests` is the stop signal handling that runs and the demo share.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from millrace.apps.app import App, BatchResult, Streaming
from millrace.apps.options import RunOptions
from millrace.apps.progress_lines import ProgressLines
from millrace.apps.state_schema import record_state
from millrace.config.workspace import Workspace
from millrace.engine.progress import watch
from millrace.engine.session import command_session, poll_less_when_idle

GRACE_S = 60.0
"""How long a stopping app waits for a query to be between micro-batches before stopping it."""

_PROGRESS_EVERY_S = 2.0
_IDLE_POLL_S = 0.05


def drive(
    workspace: Workspace,
    app: App,
    options: RunOptions,
    *,
    say: Callable[[str], None] = print,
    on_progress: Callable[[], None] = lambda: None,
) -> None:
    """Run `app`'s streaming queries until they end or the process is asked to stop.

    The caller has checked the start (`millrace.ops.lifecycle.check_start`) and holds the
    app's driver lock. `say` gets the lines to print; `on_progress` is called after each look
    that found new micro-batches.
    """
    workspace = options.on_master(workspace)
    # Installed before Spark starts, which takes the longest: a stop then waits for no batch.
    with stop_requests() as stopping, command_session(workspace.settings, app.name) as spark:
        drive_on(spark, workspace, app, options, stopping, say=say, on_progress=on_progress)


def drive_on(
    spark: SparkSession,
    workspace: Workspace,
    app: App,
    options: RunOptions,
    stopping: threading.Event,
    *,
    say: Callable[[str], None] = print,
    on_progress: Callable[[], None] = lambda: None,
    starting: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> None:
    """Run `app`'s streaming queries on `spark` until they end or `stopping` is set.

    What `drive` does once it has a session and a stop signal; a host
    (`millrace.ops.host`) calls it on an app session of its own, on a thread per app, with
    `starting`, a context that the app's start (which imports its functions) runs in.
    """
    watch(spark)
    poll_less_when_idle(spark, workspace.settings.idle_poll_delay_ms)
    try:
        with contextlib.ExitStack() as started:
            # Recorded before the first micro-batch can commit: a processor's buckets are read
            # back from it at the next start.
            record_state(workspace, app.name, app.fingerprint(workspace))
            with starting():
                running = started.enter_context(app.start(spark, workspace, options.trigger))
            say(running.started)
            _watch(app.name, running, stopping, say, on_progress)
    except KeyboardInterrupt:
        say("stopping...")


def run_batch(workspace: Workspace, app: App, *, start_ms: int, end_ms: int) -> BatchResult:
    """Run `app` once over its inputs' records on the bus from `start_ms` up to `end_ms`."""
    app.require_inputs(workspace)
    with command_session(workspace.settings, app.name) as spark:
        return app.run_batch(spark, workspace, start_ms=start_ms, end_ms=end_ms)


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


def _watch(
    name: str,
    running: Streaming,
    stopping: threading.Event,
    say: Callable[[str], None],
    on_progress: Callable[[], None],
) -> None:
    """Say the running app's progress until it ends or is stopped; then its summary."""
    lines = ProgressLines(name)
    try:
        while any(query.isActive for query in running.queries) and not stopping.is_set():
            if lines.say_new(running.queries, say):
                on_progress()
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
    lines.say_new(running.queries, say, stopped=True)
    for line in running.summary(lines.totals):
        say(line)
    if stopping.is_set():
        say("stopped")
