"""examples/zeitgeist.py's cases: query records as they arrive, and in plain Python the
per-second counts and the spikes and dips the example must give for them.

The example's own tests (tests/examples/test_zeitgeist.py) and its live runs
(tests/apps/processors/test_examples.py) share them.
"""

import math
import random
from collections import Counter

import pytest

from tests.examples import load_example

Zeitgeist = load_example("zeitgeist").Zeitgeist

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds
LATENESS_MS = 5_000
MOST_DELAY_MS = LATENESS_MS - 2_000  # records come out of order, but none is late
BATCH_MS = 2_000
QUIET_MS = Zeitgeist.quiet_seconds_before_sleep * 1000
CLOSING_QUERY = "end-of-test"


def queries_per_second(counts: dict[str, list[int]], rng: random.Random) -> list[dict]:
    """Query records, `counts[query][i]` of them at random instants of second i after T0."""
    return [
        {"query": query, "time": T0 + second * 1000 + rng.randrange(1000)}
        for query, per_second in counts.items()
        for second, count in enumerate(per_second)
        for _ in range(count)
    ]


def micro_batches(records: list[dict], rng: random.Random) -> list[list[dict]]:
    """The records as they arrive: each up to MOST_DELAY_MS after its event time, gathered in
    micro-batches of BATCH_MS of arrival time, with a closing record far in the future after
    them, to move the watermark past every second."""
    arrivals = sorted(
        (record["time"] + rng.randrange(MOST_DELAY_MS), index, record)
        for index, record in enumerate(records)
    )
    batches: dict[int, list[dict]] = {}
    for arrival, _, record in arrivals:
        batches.setdefault(arrival // BATCH_MS, []).append(record)
    latest = max(record["time"] for record in records)
    closing = {"query": CLOSING_QUERY, "time": latest + 3_600_000}
    return [batches[batch] for batch in sorted(batches)] + [[closing]]


def expected_counts(records: list[dict]) -> dict[tuple[str, int], int]:
    """Plain Python: every second from a query's record to a quiet minute after it, with its
    count (zero when it has no record); the closing record's second never closes."""
    records_per_second = Counter(
        (record["query"], record["time"] // 1000 * 1000) for record in records
    )
    counts = {}
    for query, second in records_per_second:
        for awake in range(second, second + QUIET_MS + 1, 1000):
            counts[(query, awake)] = records_per_second[(query, awake)]
    return counts


def expected_anomalies(counts: dict[tuple[str, int], int]) -> list[dict]:
    """Plain Python: each query's seconds in order, judged against an exponentially weighted
    mean and variance of the seconds before, once the warm-up is over."""
    weight = Zeitgeist.weight_of_new_second
    anomalies = []
    for query in sorted({query for query, _ in counts}):
        mean = variance = 0.0
        for seen, second in enumerate(sorted(s for q, s in counts if q == query)):
            count = counts[(query, second)]
            if seen >= Zeitgeist.warm_up_seconds:
                margin = Zeitgeist.deviations_for_anomaly * max(
                    math.sqrt(variance), Zeitgeist.minimum_standard_deviation
                )
                if abs(count - mean) > margin:
                    kind = "spike" if count > mean else "dip"
                    anomalies.append(
                        {
                            "query": query,
                            "second": second,
                            "count": count,
                            "expected": pytest.approx(mean),
                            "kind": kind,
                        }
                    )
            if seen == 0:
                mean = float(count)
            else:
                variance = (1 - weight) * (variance + weight * (count - mean) ** 2)
                mean = (1 - weight) * mean + weight * count
    return anomalies


def by_query_and_second(values: list[dict]) -> list[dict]:
    return sorted(values, key=lambda value: (value["query"], value["second"]))
