"""ProcessorTester: micro-batches in memory, and the issue's WindowCounter against plain Python."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

import random
from collections import Counter

import pytest

from millrace import Input, MapState, Processor
from millrace.errors import ProcessorError
from millrace.processor.execution import record_id
from millrace.records import Record
from millrace.testing import ProcessorTester

T0 = 1_767_225_600_000
LATENESS_MS = 10_000


class WindowCounter(Processor):
    name = "window_counter"
    inputs = [Input("queries", key="query", time="ts", lateness="10s")]
    counts = MapState(key=int, value=int)

    def on_record(self, key, record, ctx):
        bucket = ctx.event_time_ms // 1000 * 1000
        self.counts[bucket] = self.counts.get(bucket, 0) + 1
        ctx.set_timer(f"close-{bucket}", event_time_ms=bucket + 1000)

    def on_timer(self, key, timer, ctx):
        bucket = timer.time_ms - 1000
        ctx.produce(
            "window_counts",
            {"query": key, "bucket": bucket, "count": self.counts.pop(bucket)},
            time_ms=bucket,
        )


def random_batches(seed: int) -> list[list[dict]]:
    """Ten micro-batches of queries, event times drifting forward with some disorder."""
    rng = random.Random(seed)
    batches = []
    for batch in range(10):
        batches.append(
            [
                {
                    "query": rng.choice(["cats", "dogs", "fish"]),
                    "ts": T0 + batch * 3_000 + rng.randint(-15_000, 3_000),
                }
                for _ in range(rng.randint(5, 40))
            ]
        )
    return batches


def expected_counts(batches: list[list[dict]]) -> tuple[Counter, int]:
    """Plain Python: drop records behind the previous batches' latest time minus lateness,
    count the rest per query and one-second bucket."""
    counts: Counter = Counter()
    late = 0
    latest = None
    for batch in batches:
        watermark = None if latest is None else latest - LATENESS_MS
        for record in batch:
            if watermark is not None and record["ts"] < watermark:
                late += 1
            else:
                counts[(record["query"], record["ts"] // 1000 * 1000)] += 1
        latest = max([record["ts"] for record in batch] + ([latest] if latest else []))
    return counts, late


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_counter_counts_every_on_time_query_once_per_second(seed: int) -> None:
    batches = random_batches(seed)
    tester = ProcessorTester(WindowCounter)
    for batch in batches:
        tester.feed("queries", batch)
        tester.run_batch()
    tester.advance_watermark(T0 + 10**7)
    tester.fire_timers()

    counts, late = expected_counts(batches)
    produced = Counter()
    for value in tester.values("window_counts"):
        produced[(value["query"], value["bucket"])] += value["count"]
    assert produced == counts
    assert len(tester.values("window_counts")) == len(counts)  # one production per window
    assert len(tester.late) == late > 0
    assert all(tester.state(query) == {"counts": {}} for query in ("cats", "dogs", "fish"))


def test_a_window_is_produced_only_once_the_watermark_passes_its_end() -> None:
    tester = ProcessorTester(WindowCounter)
    tester.feed("queries", [{"query": "cats", "ts": T0 + 500}, {"query": "cats", "ts": T0 + 900}])
    tester.run_batch()
    tester.advance_watermark(T0 + 999)
    tester.fire_timers()
    assert tester.values("window_counts") == []

    tester.advance_watermark(T0 + 1000)
    tester.fire_timers()
    assert tester.values("window_counts") == [{"query": "cats", "bucket": T0, "count": 2}]
    assert tester.productions["window_counts"][0].time_ms == T0


def test_fed_records_wait_for_run_batch_and_get_deterministic_metadata() -> None:
    tester = ProcessorTester(WindowCounter)
    queued = tester.feed("queries", [{"query": "a", "ts": T0}, {"query": "b", "ts": T0}], bucket=2)
    explicit = Record("queries", 5, 77, None, "my-id", None, {"query": "c", "ts": T0})
    tester.feed("queries", [explicit])
    tester.fire_timers()
    assert tester.state("a") == {"counts": {}}

    tester.run_batch()
    # Fed without ids, records are known by their place in the stream.
    assert [(record_id(r), r.bucket, r.offset) for r in queued] == [
        ("queries/2/0", 2, 0),
        ("queries/2/1", 2, 1),
    ]
    assert tester.state("c") == {"counts": {T0: 1}}


def test_the_tester_refuses_unknown_streams_and_time_going_back() -> None:
    tester = ProcessorTester(WindowCounter, clock_ms=100)
    with pytest.raises(ProcessorError, match="has no input 'clicks'"):
        tester.feed("clicks", [{}])
    tester.advance_watermark(T0)
    with pytest.raises(ProcessorError, match="cannot go back"):
        tester.advance_watermark(T0 - 1)
    with pytest.raises(ProcessorError, match="cannot go back"):
        tester.advance_clock(99)


def test_a_record_dated_too_far_ahead_of_its_arrival_is_a_dead_letter_as_on_spark() -> None:
    tester = ProcessorTester(WindowCounter)
    wrong_clock = {"query": "cats", "ts": 4_102_444_800_000}  # 2100-01-01
    tester.feed(
        "queries",
        [{"query": "cats", "ts": T0}, wrong_clock, {"query": "dogs", "ts": T0 + 500}],
        arrival_ms=T0 + 1000,
    )
    tester.run_batch()

    [letter] = tester.dead_letters
    assert letter.record is not None and letter.record.value == wrong_clock
    assert letter.error == (
        "event time 2100-01-01T00:00:00.000Z is 2335219199000 ms ahead of its arrival time "
        "2026-01-01T00:00:01.000Z, more than max_future (300000 ms)"
    )
    # The watermark follows the records that were on time.
    assert tester.watermark_ms == T0 + 500 - LATENESS_MS
