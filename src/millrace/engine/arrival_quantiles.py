"""The quantiles of a micro-batch's arrival times that an app's metrics keep, for its latency.

Every input's observation (`millrace.engine.low_watermark.observed_input`) has Spark compute
when the records a micro-batch read arrived on the bus, at `ARRIVAL_LEVELS`; the monitor
(`millrace.monitor.latency`) turns them into the batch's latencies with `latencies_ms`. This
module holds what both must agree on, without Spark, so that commands that read the metrics
(`ps`, `top`) do not load it.

Example:
    >>> latencies_ms(10_000, [9_000 + 100 * n for n in range(len(ARRIVAL_LEVELS))])[:3]
    [0, 100, 200]
"""

from __future__ import annotations

from collections.abc import Sequence

ARRIVAL_LEVELS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
"""The quantiles of a micro-batch's arrival times that are kept: symmetric about the median,
so that the batch's end minus them, reversed, are its latency's at the same levels."""
ARRIVAL_ACCURACY = 1000
"""Spark's `percentile_approx` accuracy: a quantile's rank is off by at most 1/1000 of the rows."""


def latencies_ms(end_ms: int, arrival_ms: Sequence[int]) -> list[int]:
    """The latencies at `ARRIVAL_LEVELS` of a batch that ended at `end_ms`, from its arrivals'."""
    return [end_ms - int(ms) for ms in reversed(arrival_ms)]
