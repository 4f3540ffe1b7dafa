"""Zeitgeist: one-second counts per search query, and spikes and dips against each query's model.

MillWheel's running example (section 2 and figure 9 of `millwheel.txt`): search queries come
in continuously, out of order; each second's count per query is compared with what a model of
that query predicts, and the seconds whose count is far above it (spikes) or far below it (dips)
are reported. `Zeitgeist` reads the stream `queries`, records like
`{"query": "cats", "time": "2026-01-01T00:00:00.250Z"}` (or epoch milliseconds), keyed by the
query, and per query:

1. Counts each record into its second (MillWheel's windower, figure 9), in the map state
   `counts`, by the second's start in epoch milliseconds.
2. Closes the seconds in order, with one event-time timer (`close-second`) set at the end of
   the oldest open second. It fires once the watermark passes that end, that is once every
   record of the second has come in (or is late and dropped), so a second that got no record
   is known to have a count of zero: only a watermark timer can tell a dip from a delay. The
   firing closes every second the watermark has passed: each produces
   `{"query", "second", "count"}` to `query_counts`, is judged against the model and updates
   it; then the timer moves to the end of the next open second.
3. The model is an exponentially weighted mean (`expected_count`) and variance
   (`count_variance`) of the query's per-second counts, zeros included, each new second
   weighing `weight_of_new_second`. Once the model has seen `warm_up_seconds` seconds, a count
   more than `deviations_for_anomaly` standard deviations (never counting fewer than
   `minimum_standard_deviation`, so that a steady query's tiny variance does not make every
   wobble an anomaly) above the mean is a spike, below it a dip; either is produced as
   `{"query", "second", "count", "expected", "kind": "spike" | "dip"}` to `query_anomalies`.
   The model learns from every second, anomalies included, as the paper's model does, so a
   lasting change of level stops being an anomaly after a while.
4. A query with no record for `quiet_seconds_before_sleep` seconds goes to sleep: its seconds
   are no longer produced, which keeps a query nobody searches from costing a timer a second
   forever. Its model stays (for `model_ttl` of processing time), and its next record wakes
   it at that record's second.

Both kinds of anomaly are judged when the second closes. MillWheel notes that a spike could be
reported before the watermark, since late records only add to a count; waiting judges each
second once, on its full count. Productions carry the end of their second as their event
time, no earlier than any record counted in them. Records behind the watermark (more than
`lateness` behind the latest query seen) are dropped by the engine, as Zeitgeist drops them.

Run its test, in memory and without Spark or Kafka:
`.venv/bin/pytest -q tests/examples/test_zeitgeist.py`. On live
streams: `millrace run examples/zeitgeist.py:Zeitgeist`; in batch over a stored range:
`millrace run examples/zeitgeist.py:Zeitgeist --batch --from T --to T`
(`tests/apps/processors/test_examples.py` runs both, with a kill -9 mid-stream).

Example:
    >>> from millrace.testing import ProcessorTester
    >>> tester = ProcessorTester(Zeitgeist)
    >>> _ = tester.feed("queries", [{"query": "cats", "time": 1_767_225_600_250}])
    >>> _ = tester.run_batch()
    >>> tester.advance_watermark(1_767_225_601_000)
    >>> _ = tester.fire_timers()
    >>> tester.values("query_counts")
    [{'query': 'cats', 'second': 1767225600000, 'count': 1}]
"""

# Processor classes declare `inputs` as a list, the way the Processor API documents them.
# ruff: noqa: RUF012

from __future__ import annotations

import math
from typing import Any

from millrace import Input, MapState, Processor, ValueState
from millrace.processor import Context, Timer

SECOND_MS = 1000
CLOSE_SECOND_TIMER = "close-second"


class Zeitgeist(Processor):
    """Per-query one-second counts, and spikes and dips against a per-query model.

    Example:
        >>> Zeitgeist.kind()
        'stateful'
    """

    name = "zeitgeist"
    inputs = [Input("queries", key="query", time="time", lateness="5s")]
    counts_stream = "query_counts"
    """The stream of per-second counts (a subclass may rename it, as the live tests do)."""
    anomalies_stream = "query_anomalies"
    """The stream of spikes and dips."""

    warm_up_seconds = 30
    """Seconds the model learns from before it judges any second."""
    weight_of_new_second = 0.1
    """How much each new second moves the model's mean and variance (0 to 1)."""
    deviations_for_anomaly = 4.0
    """How many standard deviations away from the mean a count must be to be an anomaly."""
    minimum_standard_deviation = 2.0
    """The least standard deviation judged with: a floor for queries of very steady traffic."""
    quiet_seconds_before_sleep = 60
    """Seconds without a record after which a query's seconds stop being produced."""
    model_ttl = "30d"
    """How long a query's model outlives its last second, in processing time."""

    counts = MapState(key=int, value=int)
    next_second = ValueState(int)
    last_record_second = ValueState(int)
    expected_count = ValueState(float, ttl=model_ttl)
    count_variance = ValueState(float, ttl=model_ttl)
    seconds_modelled = ValueState(int, ttl=model_ttl)

    def on_record(self, key: str, record: dict[str, Any], ctx: Context) -> None:
        """Count the record into its second, and make sure the oldest open second will close.

        Example:
            >>> zeitgeist.on_record("cats", {"query": "cats"}, ctx)  # doctest: +SKIP
        """
        second = ctx.event_time_ms // SECOND_MS * SECOND_MS
        self.counts[second] = self.counts.get(second, 0) + 1
        # A record older than the next second to close (but on time) opens an earlier second:
        # the query was asleep, or this is its first second and the records came out of order.
        next_second = self.next_second.get()
        if next_second is None or second < next_second:
            self.next_second.set(second)
            if next_second is None:
                self.last_record_second.set(second)
            ctx.set_timer(CLOSE_SECOND_TIMER, event_time_ms=second + SECOND_MS)

    def on_timer(self, key: str, timer: Timer, ctx: Context) -> None:
        """Close every second the watermark has passed, in order, then wait for the next one.

        Example:
            >>> zeitgeist.on_timer("cats", timer, ctx)  # doctest: +SKIP
        """
        # One firing closes all the complete seconds, not one second per firing: after a
        # catch-up micro-batch the watermark may jump hours ahead, more seconds than a key may
        # fire timers in one micro-batch (10,000).
        second = self.next_second.get()
        quiet_ms = self.quiet_seconds_before_sleep * SECOND_MS
        while second + SECOND_MS <= ctx.watermark_ms:
            if self._close(key, second, ctx):
                self.last_record_second.set(second)
            second += SECOND_MS
            if second > self.last_record_second.get() + quiet_ms:
                # Asleep. Records of later seconds already in (after a jump of the watermark,
                # as in a batch run) wake the query at the first of them, as they would have
                # had they arrived after it fell asleep.
                if not self.counts:
                    self.next_second.clear()
                    self.last_record_second.clear()
                    return
                second = min(self.counts)
                self.last_record_second.set(second)
        self.next_second.set(second)
        ctx.set_timer(CLOSE_SECOND_TIMER, event_time_ms=second + SECOND_MS)

    def _close(self, key: str, second: int, ctx: Context) -> int:
        """Produce the complete `second`'s count and anomaly, if any, learn from it; the count."""
        count = self.counts.pop(second, 0)
        end = second + SECOND_MS
        ctx.produce(
            self.counts_stream,
            {"query": key, "second": second, "count": count},
            key=key,
            time_ms=end,
        )
        anomaly = self._judge(count)
        if anomaly is not None:
            kind, expected = anomaly
            ctx.produce(
                self.anomalies_stream,
                {
                    "query": key,
                    "second": second,
                    "count": count,
                    "expected": expected,
                    "kind": kind,
                },
                key=key,
                time_ms=end,
            )
        self._learn(count)
        return count

    def _judge(self, count: int) -> tuple[str, float] | None:
        """("spike" or "dip", the expected count) when the model is warm and `count` is far off."""
        if self.seconds_modelled.get(default=0) < self.warm_up_seconds:
            return None
        expected = self.expected_count.get()
        deviation = max(math.sqrt(self.count_variance.get()), self.minimum_standard_deviation)
        if count > expected + self.deviations_for_anomaly * deviation:
            return "spike", expected
        if count < expected - self.deviations_for_anomaly * deviation:
            return "dip", expected
        return None

    def _learn(self, count: int) -> None:
        """Move the exponentially weighted mean and variance towards `count`."""
        seconds = self.seconds_modelled.get(default=0)
        if seconds == 0:
            mean, variance = float(count), 0.0
        else:
            difference = count - self.expected_count.get()
            step = self.weight_of_new_second * difference
            mean = self.expected_count.get() + step
            variance = (1 - self.weight_of_new_second) * (
                self.count_variance.get() + difference * step
            )
        self.expected_count.set(mean)
        self.count_variance.set(variance)
        self.seconds_modelled.set(seconds + 1)
