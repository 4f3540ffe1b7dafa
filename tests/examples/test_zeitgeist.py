"""examples/zeitgeist.py against plain Python: per-second counts, and its spikes and dips."""

import random

from millrace.testing import ProcessorTester
from tests.examples.zeitgeist_cases import (
    CLOSING_QUERY,
    T0,
    Zeitgeist,
    by_query_and_second,
    expected_anomalies,
    expected_counts,
    micro_batches,
    queries_per_second,
)


def run(batches: list[list[dict]]) -> ProcessorTester:
    tester = ProcessorTester(Zeitgeist)
    for batch in batches:
        tester.feed("queries", batch)
        tester.run_batch()
    tester.fire_timers()
    return tester


def test_counts_each_query_per_second_with_zeros_until_a_quiet_minute() -> None:
    rng = random.Random(4)
    seconds = 240
    counts = {
        "cats": [rng.randint(0, 6) for _ in range(seconds)],
        "dogs": [rng.choice([0, 0, 0, 1, 2]) for _ in range(seconds)],
        # Two bursts a quiet minute and more apart: fish sleeps in between, then wakes up.
        "fish": [
            rng.randint(1, 3) if second < 40 or second >= 150 else 0 for second in range(seconds)
        ],
    }
    records = queries_per_second(counts, rng)
    tester = run(micro_batches(records, rng))

    assert tester.late == []
    produced = {
        (value["query"], value["second"]): value["count"] for value in tester.values("query_counts")
    }
    assert len(produced) == len(tester.values("query_counts")), "each second is produced once"
    assert produced == expected_counts(records)
    assert ("fish", T0 + 120_000) not in produced


def test_reports_an_injected_spike_and_dip_against_the_query_model() -> None:
    rng = random.Random(9)
    seconds = 150
    spike, dip = 60, 100
    cats = [rng.randint(15, 25) for _ in range(seconds)]
    cats[spike], cats[dip] = 80, 0
    records = queries_per_second({"cats": cats, "dogs": [5] * seconds}, rng)
    tester = run(micro_batches(records, rng))

    anomalies = by_query_and_second(tester.values("query_anomalies"))
    assert anomalies == expected_anomalies(expected_counts(records))
    during_traffic = [
        (value["query"], value["second"], value["kind"])
        for value in anomalies
        if value["second"] < T0 + seconds * 1000
    ]
    assert during_traffic == [
        ("cats", T0 + spike * 1000, "spike"),
        ("cats", T0 + dip * 1000, "dip"),
    ]
    # When its traffic stops, cats dips in its first empty second; dogs is too small to dip.
    after_traffic = [
        (value["query"], value["second"], value["kind"])
        for value in anomalies
        if value["second"] >= T0 + seconds * 1000
    ]
    assert after_traffic[0] == ("cats", T0 + seconds * 1000, "dip")
    assert {query for query, _, _ in after_traffic} == {"cats"}


def test_an_empty_second_is_counted_as_zero_only_once_the_watermark_passes_it() -> None:
    tester = ProcessorTester(Zeitgeist)
    tester.feed(
        "queries",
        [
            {"query": "cats", "time": T0 + 100},
            {"query": "cats", "time": "2026-01-01T00:00:02.300Z"},  # T0 + 2.3 s, as ISO-8601
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 1_999)
    tester.fire_timers()
    assert tester.values("query_counts") == [{"query": "cats", "second": T0, "count": 1}]

    tester.advance_watermark(T0 + 3_000)
    tester.fire_timers()
    assert tester.values("query_counts")[1:] == [
        {"query": "cats", "second": T0 + 1_000, "count": 0},
        {"query": "cats", "second": T0 + 2_000, "count": 1},
    ]


def test_a_query_behind_the_watermark_is_dropped_and_not_counted() -> None:
    tester = ProcessorTester(Zeitgeist)
    tester.feed(
        "queries", [{"query": "cats", "time": T0 + 500}, {"query": "cats", "time": T0 + 20_000}]
    )
    tester.run_batch()
    # The watermark is now 20 s - 5 s of lateness: a query of the first second is too late.
    late = tester.feed("queries", [{"query": "cats", "time": T0 + 600}])
    tester.run_batch()

    assert tester.late == late
    assert tester.values("query_counts")[0] == {"query": "cats", "second": T0, "count": 1}


def test_a_catch_up_micro_batch_hours_long_closes_every_second_without_stopping() -> None:
    # After downtime, one micro-batch may hold hours of queries, and the watermark then jumps
    # over more seconds than a key may fire timers in one micro-batch.
    records = [{"query": "cats", "time": T0 + step * 30_000} for step in range(360)]
    tester = run([records, [{"query": CLOSING_QUERY, "time": T0 + 4 * 3_600_000}]])

    produced = {
        (value["query"], value["second"]): value["count"] for value in tester.values("query_counts")
    }
    assert len(produced) > 10_000
    assert produced == expected_counts(records)


def test_one_micro_batch_then_the_watermark_at_the_end_gives_the_same_values() -> None:
    """As a batch run does it: the values of a run in many micro-batches, wakes included."""
    rng = random.Random(12)
    seconds = 200
    counts = {
        "cats": [rng.randint(0, 6) for _ in range(seconds)],
        "fish": [2 if second < 20 or second >= 120 else 0 for second in range(seconds)],
    }
    records = queries_per_second(counts, rng)
    batches = micro_batches(records, rng)
    streamed = run(batches)
    closing = batches[-1][0]
    at_once = ProcessorTester(Zeitgeist)
    at_once.feed("queries", [record for batch in batches[:-1] for record in batch])
    at_once.run_batch()
    at_once.advance_watermark(closing["time"])
    at_once.fire_timers()

    for stream in ("query_counts", "query_anomalies"):
        assert by_query_and_second(at_once.values(stream)) == by_query_and_second(
            streamed.values(stream)
        )
    assert ("fish", T0 + 120_000) in {
        (value["query"], value["second"]) for value in at_once.values("query_counts")
    }
