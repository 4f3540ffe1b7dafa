"""An app's end-to-end latency: from a record's arrival on the bus to the end of its batch.

A record's latency is the end of the micro-batch that read it minus its append time on the
bus. What the batch produced from it (a processor's productions, a SQL app's rows) was
written before that end, so this is the time to its productions' arrival plus the batch's
last step, the commit of its offsets: an upper bound, by at most that step.

Every batch's metrics record holds, per input, when its records arrived as quantiles at
`ARRIVAL_LEVELS` (`millrace.engine.metrics.InputRecord`); the batch's end minus them,
reversed, are its latencies at the same levels. Over several batches, each batch's latency
is taken as spread linearly between its quantiles, weighted by its records, and the quantiles
of the whole are read from that mixture.

Example: a batch that ended at 2 s read 400 records that arrived evenly from 0 s to 1 s:

    >>> arrived = [1000 * level for level in ARRIVAL_LEVELS]
    >>> fields = {"batch_duration_ms": 2000, "inputs": {"clicks": {"arrivals": 400,
    ...     "arrival_ms": arrived}}}
    >>> latency = recent_latency([Batch("app", "app.q", "run", 7, 0, fields)])
    >>> latency.records, latency.median_s, latency.p99_s
    (400, 1.5, 1.99)
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from millrace.engine.arrival_quantiles import ARRIVAL_LEVELS, latencies_ms
from millrace.monitor.metrics_log import Batch


@dataclass(frozen=True)
class Latency:
    """The median and 99th percentile of the latency of `records` records, in seconds."""

    records: int
    median_s: float
    p99_s: float

    @property
    def described(self) -> str:
        """The two figures as `ps` shows them.

        Example:
            >>> Latency(1200, 0.84, 1.9).described
            'p50 0.84s, p99 1.90s'
        """
        return f"p50 {self.median_s:.2f}s, p99 {self.p99_s:.2f}s"

    @property
    def pair(self) -> str:
        """The two figures as `top` and the dashboard show them, median/p99 in seconds.

        Example:
            >>> Latency(1200, 0.84, 1.9).pair
            '0.84/1.90'
        """
        return f"{self.median_s:.2f}/{self.p99_s:.2f}"


def recent_latency(batches: Sequence[Batch]) -> Latency | None:
    """The latency of the records `batches` read, or None when they read none."""
    parts: list[tuple[int, list[int]]] = []
    for batch in batches:
        end_ms = batch.time_ms + int(batch.fields.get("batch_duration_ms") or 0)
        for read in (batch.fields.get("inputs") or {}).values():
            arrivals = read.get("arrival_ms")
            if read.get("arrivals") and arrivals and len(arrivals) == len(ARRIVAL_LEVELS):
                parts.append((int(read["arrivals"]), latencies_ms(end_ms, arrivals)))
    if not parts:
        return None
    return Latency(
        records=sum(weight for weight, _ in parts),
        median_s=_mixture_quantile(parts, 0.5) / 1000,
        p99_s=_mixture_quantile(parts, 0.99) / 1000,
    )


def _mixture_quantile(parts: list[tuple[int, list[int]]], level: float) -> float:
    """The `level` quantile of the weighted mixture of `parts`' piecewise-linear distributions.

    Each part is a weight and its quantiles at `ARRIVAL_LEVELS`. Between two consecutive knots
    of all the parts the mixture's distribution is linear, so the quantile is either the knot
    where it reaches `level` or interpolated between that knot and the one before.
    """
    total = sum(weight for weight, _ in parts)

    def share(knot: float, *, strictly_below: bool) -> float:
        return (
            sum(
                weight * _share(quantiles, knot, strictly_below=strictly_below)
                for weight, quantiles in parts
            )
            / total
        )

    knots = sorted({ms for _, quantiles in parts for ms in quantiles})
    # The first knot at which the mixture reaches `level`, by bisection: it only grows.
    first, last = 0, len(knots) - 1
    while first < last:
        middle = (first + last) // 2
        if share(knots[middle], strictly_below=False) >= level:
            last = middle
        else:
            first = middle + 1
    knot = knots[first]
    if first == 0:
        return float(knot)
    previous = knots[first - 1]
    reached = share(previous, strictly_below=False)
    below = share(knot, strictly_below=True)
    if below < level:
        # The mixture jumps past `level` at this knot: a part's quantiles that are equal.
        return float(knot)
    return previous + (knot - previous) * (level - reached) / (below - reached)


def _share(quantiles: list[int], value: float, *, strictly_below: bool) -> float:
    """The share of one part's distribution at or below `value` (or strictly below it)."""
    if value < quantiles[0] or (strictly_below and value == quantiles[0]):
        return 0.0
    if value > quantiles[-1] or (not strictly_below and value == quantiles[-1]):
        return 1.0
    # The last quantile below `value` (at or below, unless strictly), and the next one.
    index = (bisect.bisect_left if strictly_below else bisect.bisect_right)(quantiles, value) - 1
    low, high = quantiles[index], quantiles[index + 1]
    level, next_level = ARRIVAL_LEVELS[index], ARRIVAL_LEVELS[index + 1]
    return level + (next_level - level) * (value - low) / (high - low)
