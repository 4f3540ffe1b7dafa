"""How long the micro-batches of running queries took, for tests that bound a delay by them.

A delay that takes a few micro-batches (an idle tick read, a window closed, a timer fired)
takes a second or two on a quiet 2-core machine and several times that beside a busy test:
such a test bounds it by the micro-batches that ran meanwhile, not by a fixed number.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pyspark.sql.streaming.query import StreamingQuery


def longest_batch_ms(queries: Iterable[StreamingQuery], start_ms: float, end_ms: float) -> float:
    """The longest micro-batch of `queries` that ran at some moment in [start_ms, end_ms]."""
    return max(
        (
            progress["batchDuration"]
            for query in queries
            for progress in query.recentProgress
            if _started_ms(progress) + progress["batchDuration"] >= start_ms
            and _started_ms(progress) <= end_ms
        ),
        default=0,
    )


def _started_ms(progress: dict) -> float:
    """When the micro-batch of a query's `progress` started, in epoch milliseconds."""
    return datetime.fromisoformat(progress["timestamp"]).timestamp() * 1000
