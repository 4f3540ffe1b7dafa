"""The progress of streaming queries as the session reports it: each run's batches, its late rows.

Spark reports each micro-batch of a query in a progress event. One listener per session,
installed by `watch`, keeps for each run of a query its name, its last progress
(`last_progress`, `app_progresses`), its recent ones (`recent_progress`) and the rows its
state operators dropped as later than the watermark (`late_rows`). The totals of a running
query are those so far; those of a stopped query are final, since reading them waits for the
listener to have had its last event.

What follows a query (the idle ticker, the lines an app prints) reads its progress here
rather than asking the query: asking goes into the JVM, which builds the progress again,
every time, and a quiet app would pay for it every second for nothing. The query's own
`recentProgress` also holds the reports Spark makes while the query is idle, which carry the
id of the micro-batch to come and no record; the listener gets only micro-batches that ran.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass, field, replace

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
    StreamingQueryProgress,
)
from pyspark.sql.streaming.query import StreamingQuery

from millrace.engine import spark_internals
from millrace.engine.session import add_listener
from millrace.errors import EngineError

# Spark hands events to listeners on a queue of its own, after the query has moved on; it
# drops them when that queue overflows, so waiting for a stopped query's last one is bounded.
_LAST_EVENT_WAIT_S = 10.0
# As many as Spark keeps of a query's (`spark.sql.streaming.numRecentProgressUpdates`).
_RECENT = 100


@dataclass
class _Run:
    name: str | None = None
    last: StreamingQueryProgress | None = None
    recent: deque[StreamingQueryProgress] = field(default_factory=lambda: deque(maxlen=_RECENT))
    late_rows: int = 0
    ended: bool = False


_runs: dict[str, _Run] = {}
_changed = threading.Condition()
_watched: set[str] = set()


def watch(spark: SparkSession) -> None:
    """Follow the queries `spark` starts from now on; calling it again changes nothing."""
    # By the JVM's session: PySpark may wrap one session in several Python objects.
    session = spark_internals.session_uuid(spark)
    with _changed:
        if session not in _watched:
            add_listener(spark, _Runs())
            _watched.add(session)


def last_progress(query: StreamingQuery) -> StreamingQueryProgress | None:
    """The last progress `query` reported in this run; None before its first micro-batch.

    Raises EngineError for a query started before `watch` was called on its session.
    """
    run_id = _run_id(query)
    with _changed:
        run = _runs.get(run_id)
    if run is None:
        raise EngineError(
            f"query {query.name} is not followed: it started before its session was watched",
            hint="call millrace.engine.progress.watch(spark) before starting the query",
        )
    return run.last


def app_progresses(app: str) -> list[StreamingQueryProgress | None]:
    """The last progress of each running query of `app`, None for one yet to report one.

    An app's queries are named `<app>.<...>`; queries started before `watch` are not known.
    """
    latest: dict[str | None, _Run] = {}
    with _changed:
        # Runs in the order they started: a query's latest run stands for it, should the
        # end of an earlier run of the same name have been lost with a stopped session.
        for run in _runs.values():
            if (run.name or "").startswith(f"{app}."):
                latest[run.name] = run
        return [run.last for run in latest.values() if not run.ended]


def recent_progress(
    query: StreamingQuery, *, stopped: bool = False
) -> list[StreamingQueryProgress]:
    """The progress of the last micro-batches `query` ran in this run (at most 100), oldest first.

    With `stopped`, said of a query that has stopped, it waits for the query's last event
    first, so that they are all it ran.
    """
    run_id = _run_id(query)
    with _changed:
        if stopped:
            _changed.wait_for(
                lambda: run_id not in _runs or _runs[run_id].ended, timeout=_LAST_EVENT_WAIT_S
            )
        run = _runs.get(run_id)
        return list(run.recent) if run is not None else []


def late_rows(query: StreamingQuery) -> int:
    """The rows the state operators of `query` dropped as later than the watermark, this run.

    A window is closed by the first micro-batch that starts with the watermark past its end;
    a stateful operator drops the rows of a closed window that come in later micro-batches.
    Spark counts the rows each operator receives: an aggregation's are partial aggregates per
    group and window of a micro-batch, so late records of one group and window that arrive
    in the same micro-batch count once.
    """
    return _totals(query).late_rows


def _totals(query: StreamingQuery) -> _Run:
    run, stopped = _run_id(query), not query.isActive
    with _changed:
        if run not in _runs:
            return _Run()
        if stopped:
            _changed.wait_for(lambda: _runs[run].ended, timeout=_LAST_EVENT_WAIT_S)
        current = _runs[run]
        return replace(current, recent=current.recent.copy())


def _run_id(query: StreamingQuery) -> str:
    """`query`'s run id, asked of the JVM once per query: a quiet app's loop looks every 2 s."""
    run_id = _run_ids.get(query)
    if run_id is None:
        run_id = _run_ids[query] = query.runId
    return run_id


_run_ids: weakref.WeakKeyDictionary[StreamingQuery, str] = weakref.WeakKeyDictionary()


class _Runs(StreamingQueryListener):
    """Keeps in `_runs` each query run's name, its last progress and the late rows it dropped."""

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's callback names
        # Spark calls this before `start()` returns, so a started query is always in `_runs`.
        with _changed:
            _runs[str(event.runId)] = _Run(name=event.name)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        progress = event.progress
        dropped = sum(operator.numRowsDroppedByWatermark for operator in progress.stateOperators)
        with _changed:
            run = _runs.setdefault(str(progress.runId), _Run(name=progress.name))
            run.last = progress
            run.recent.append(progress)
            run.late_rows += dropped

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        with _changed:
            _runs.setdefault(str(event.runId), _Run()).ended = True
            _changed.notify_all()
