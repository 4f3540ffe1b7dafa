"""Totals over the progress of streaming queries: the late rows they dropped.

Spark reports each micro-batch of a query in a progress event. One listener per session,
installed by `watch`, adds up for each run of a query the rows its state operators dropped
as later than the watermark. The totals of a running query are those so far; those of a stopped
query are final, since reading them waits for the listener to have had its last event.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from millrace.engine.session import add_listener

# Spark hands events to listeners on a queue of its own, after the query has moved on; it
# drops them when that queue overflows, so waiting for a stopped query's last one is bounded.
_LAST_EVENT_WAIT_S = 10.0


@dataclass
class _Run:
    late_rows: int = 0
    ended: bool = False


_runs: dict[str, _Run] = {}
_changed = threading.Condition()
_watched: set[int] = set()


def watch(spark: SparkSession) -> None:
    """Keep the totals of the queries `spark` starts from now on; once per session is enough."""
    with _changed:
        if id(spark) not in _watched:
            add_listener(spark, _Totals())
            _watched.add(id(spark))


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
    run, stopped = query.runId, not query.isActive
    with _changed:
        if run not in _runs:
            return _Run()
        if stopped:
            _changed.wait_for(lambda: _runs[run].ended, timeout=_LAST_EVENT_WAIT_S)
        return replace(_runs[run])


class _Totals(StreamingQueryListener):
    """Adds up each query run's progress events into `_runs`."""

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's callback names
        # Spark calls this before `start()` returns, so a started query is always in `_runs`.
        with _changed:
            _runs[str(event.runId)] = _Run()

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        progress = event.progress
        dropped = sum(operator.numRowsDroppedByWatermark for operator in progress.stateOperators)
        with _changed:
            run = _runs.setdefault(str(progress.runId), _Run())
            run.late_rows += dropped

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        with _changed:
            _runs.setdefault(str(event.runId), _Run()).ended = True
            _changed.notify_all()
