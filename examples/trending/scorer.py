"""Scorer (figure 3 of the Facebook paper): a trending score per (event, topic) and pane.

Reads `trending.enriched` (the Joiner's output), keyed by (event, topic), and per key:

1. counts records into 10-second panes (`counts`, by pane start in epoch milliseconds), each
   with an event-time timer at the pane's end;
2. when the watermark passes a pane's end, closes it: its count, the sliding-window count
   over the last `WINDOW_PANES` panes (this one and the closed panes before it, kept in
   `recent`), and the long-term trend (`trend`, an exponentially weighted mean of the pane
   counts, decayed for the panes that got no record) give the score

       score = window_count * (count + 1) / (trend + 1)

   so an event scores high when it is frequent now and was rare before;
3. produces `{event, topic, event_time, pane_count, window_count, trend, score}` to
   `trending.scores`, with an event time at the pane's last millisecond (in the pane's
   10-second window for the Ranker, and no earlier than any record counted), then folds the
   pane into the trend.

`score_panes` is the same rule in plain Python, over pane counts; the end-to-end test uses it
as its independent computation.

Example:
    >>> from millrace.testing import ProcessorTester
    >>> tester = ProcessorTester(Scorer)
    >>> _ = tester.feed("trending.enriched", [
    ...     {"event": "#oscars", "topic": "movies", "event_time": 1_767_225_600_250}])
    >>> _ = tester.run_batch()
    >>> tester.advance_watermark(1_767_225_610_000)
    >>> _ = tester.fire_timers()
    >>> tester.values("trending.scores")[0]["score"]
    2.0
"""

# Processor classes declare `inputs` as a list, the way the Processor API documents them.
# ruff: noqa: RUF012

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from millrace import Input, MapState, Processor, ValueState
from millrace.processor import Context, Timer

PANE_MS = 10_000
"""Pane (and Ranker window) length."""
WINDOW_PANES = 3
"""Panes in the sliding window: the closing pane and the two before it (30 seconds)."""
TREND_WEIGHT = 0.2
"""How much each new pane moves the long-term trend (0 to 1)."""
INPUT_STREAM = "trending.enriched"
OUTPUT_STREAM = "trending.scores"


def score_of(count: int, window_count: int, trend: float) -> float:
    """The trending score of a pane, from its count, its window's count and the prior trend.

    Example:
        >>> score_of(4, 6, 1.0)
        15.0
    """
    return round(window_count * (count + 1) / (trend + 1.0), 6)


def score_panes(panes: dict[int, int]) -> list[dict[str, Any]]:
    """Plain Python: the scores one key's pane counts (pane start -> count) give, in order.

    Example:
        >>> [s["score"] for s in score_panes({0: 1, 10_000: 2})]
        [2.0, 7.5]
    """
    scores = []
    trend, last = 0.0, None
    for pane in sorted(panes):
        count = panes[pane]
        if last is not None:
            trend *= (1 - TREND_WEIGHT) ** ((pane - last) // PANE_MS - 1)
        window_count = sum(panes.get(pane - n * PANE_MS, 0) for n in range(WINDOW_PANES))
        scores.append(
            {
                "pane": pane,
                "pane_count": count,
                "window_count": window_count,
                "trend": round(trend, 6),
                "score": score_of(count, window_count, trend),
            }
        )
        trend = (1 - TREND_WEIGHT) * trend + TREND_WEIGHT * count
        last = pane
    return scores


class Scorer(Processor):
    """Sliding-window counts and a long-term trend per (event, topic); a score per pane.

    Example:
        >>> Scorer.kind()
        'stateful'
    """

    name = "trending_scorer"
    inputs = [Input(INPUT_STREAM, key=("event", "topic"), time="event_time", lateness="5s")]

    counts = MapState(key=int, value=int)
    recent = MapState(key=int, value=int)
    trend = ValueState(float)
    trend_pane = ValueState(int)

    def on_record(self, key: tuple[str, str], record: dict[str, Any], ctx: Context) -> None:
        """Count the record into its pane and make sure the pane closes.

        Example:
            >>> scorer.on_record(("#oscars", "movies"), record, ctx)  # doctest: +SKIP
        """
        pane = ctx.event_time_ms // PANE_MS * PANE_MS
        self.counts[pane] = self.counts.get(pane, 0) + 1
        ctx.set_timer(f"pane-{pane}", event_time_ms=pane + PANE_MS)

    def on_timer(self, key: tuple[str, str], timer: Timer, ctx: Context) -> None:
        """Close the pane: score it, produce the score, fold it into the trend.

        Example:
            >>> scorer.on_timer(("#oscars", "movies"), timer, ctx)  # doctest: +SKIP
        """
        pane = timer.time_ms - PANE_MS
        count = self.counts.pop(pane, 0)
        window_count = count + sum(
            self.recent.get(pane - n * PANE_MS, 0) for n in range(1, WINDOW_PANES)
        )
        trend = self.trend.get(default=0.0)
        last = self.trend_pane.get()
        if last is not None:
            trend *= (1 - TREND_WEIGHT) ** ((pane - last) // PANE_MS - 1)
        event, topic = key
        end = pane + PANE_MS - 1
        ctx.produce(
            OUTPUT_STREAM,
            {
                "event": event,
                "topic": topic,
                "event_time": datetime.fromtimestamp(end / 1000, UTC).isoformat(),
                "pane_count": count,
                "window_count": window_count,
                "trend": round(trend, 6),
                "score": score_of(count, window_count, trend),
            },
            key=f"{event}|{topic}",
            time_ms=end,
        )
        self.trend.set((1 - TREND_WEIGHT) * trend + TREND_WEIGHT * count)
        self.trend_pane.set(pane)
        self.recent[pane] = count
        for old in [p for p in self.recent if p <= pane - WINDOW_PANES * PANE_MS]:
            del self.recent[old]
