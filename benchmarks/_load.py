"""Input at a fixed rate, and the search for the highest rate a streaming query sustains.

The papers' maximum sustainable throughput is the highest input rate at which processing lag
stays bounded. Here a publisher process writes records to a fresh stream at a fixed rate,
stamping each with the wall-clock time as its event time, while the query under test runs
with its default trigger; once a second the probe samples the backlog: the records the stream
holds minus the offsets the query has processed. A rate is sustained when, over the measured
window (after a warm-up), the backlog neither ends above `rate * BACKLOG_SECONDS` nor grows:
the slope of a least-squares line through its second half stays under `GROWTH_FRACTION` of
the rate. A query that falls behind shows a backlog that grows by the shortfall every second.

The search doubles the rate from a start while it is sustained, then halves the gap between
the last sustained and the first failed rate a few times. The publisher, a Python process on
the same cores, has a ceiling of its own: a probe records the rate it actually achieved, and
a search that hits the publisher's ceiling says so instead of reporting a query's limit.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Protocol

from confluent_kafka import Producer
from pyspark.sql.streaming import StreamingQuery

BACKLOG_SECONDS = 10
"""A sustained query is at most this many seconds of input behind at the end of a probe."""
GROWTH_FRACTION = 0.02
"""A sustained query's backlog grows by less than this fraction of the input rate a second."""
_TICKS_PER_S = 50


@dataclass(frozen=True)
class Probe:
    """One probe: the rate asked for and achieved, the backlog's end and slope, the verdict."""

    rate: int
    achieved_rate: float
    final_backlog: int
    backlog_slope: float
    sustained: bool
    publisher_bound: bool


Payloads = Callable[[int, int], list[bytes]]
"""`payloads(first_number, count)`: `count` record values stamped with the current time."""


def publish_at_rate(
    bootstrap_servers: str,
    stream: str,
    rate: int,
    seconds: float,
    payloads: Payloads,
    ids: str = "load",
) -> multiprocessing.Process:
    """Start a process that publishes `rate` records a second to `stream` for `seconds`.

    The records' ids are `<ids>:<number>`, numbered from 0: publishers that write to the same
    stream one after the other each need their own `ids`, or an exactly-once reader drops
    the later ones' records as copies. The process is spawned, not forked: the benchmark's
    own process holds a JVM gateway. `payloads` must be a module-level function so that the
    new process can import it.
    """
    context = multiprocessing.get_context("spawn")
    process = context.Process(
        target=_publish,
        args=(bootstrap_servers, stream, rate, seconds, payloads, ids),
        daemon=True,
    )
    process.start()
    return process


class QueryUnderTest(Protocol):
    """A running streaming query, or an app's queries, as a probe watches it."""

    def processed_offsets(self) -> dict[int, int]:
        """The next offset to process per bucket of the input stream."""

    def stop(self) -> None:
        """Stop the queries."""


def probe(
    rate: int,
    start_query: Callable[[str], QueryUnderTest],
    new_stream: Callable[[], str],
    bootstrap_servers: str,
    payloads: Payloads,
    end_offsets: Callable[[str], dict[int, int]],
    warmup_s: float,
    measure_s: float,
) -> Probe:
    """Run the query `start_query(stream)` starts on a fresh stream fed at `rate`: kept up?"""
    stream = new_stream()
    query = start_query(stream)
    publisher = publish_at_rate(bootstrap_servers, stream, rate, warmup_s + measure_s, payloads)
    samples: list[tuple[float, int, int]] = []
    try:
        time.sleep(warmup_s)
        measure_start = time.monotonic()
        while time.monotonic() - measure_start < measure_s:
            published = sum(end_offsets(stream).values())
            done = sum(query.processed_offsets().values())
            samples.append((time.monotonic() - measure_start, published, published - done))
            time.sleep(1.0)
    finally:
        publisher.join(timeout=30)
        if publisher.is_alive():
            publisher.kill()
        query.stop()
    elapsed = samples[-1][0] - samples[0][0]
    achieved = (samples[-1][1] - samples[0][1]) / elapsed if elapsed > 0 else 0.0
    slope = _slope([(t, backlog) for t, _, backlog in samples[len(samples) // 2 :]])
    final_backlog = samples[-1][2]
    return Probe(
        rate=rate,
        achieved_rate=achieved,
        final_backlog=final_backlog,
        backlog_slope=slope,
        sustained=final_backlog <= rate * BACKLOG_SECONDS and slope < GROWTH_FRACTION * rate,
        publisher_bound=achieved < 0.9 * rate,
    )


def processed_offsets(queries: list[StreamingQuery], stream: str) -> dict[int, int]:
    """The offsets per bucket of `stream` that every one of `queries` has processed."""
    offsets: dict[int, int] | None = None
    for query in queries:
        progress = query.lastProgress
        ends: dict[int, int] = {}
        for source in progress["sources"] if progress else []:
            end = source.get("endOffset")
            if isinstance(end, str):
                end = json.loads(end)
            # A query reading each bucket with a source of its own (the low watermark's
            # plan) has one source per bucket, each with its own bucket's offset.
            if isinstance(end, dict) and stream in end:
                ends |= {int(bucket): offset for bucket, offset in end[stream].items()}
        if offsets is None:
            offsets = ends
        else:
            offsets = {bucket: min(o, ends.get(bucket, 0)) for bucket, o in offsets.items()}
    return offsets or {}


def search(start_rate: int, refinements: int, run_probe: Callable[[int], Probe]) -> Iterator[Probe]:
    """The probes of a search for the highest sustained rate, in the order they ran.

    Doubles from `start_rate` while sustained (and while the publisher keeps up), then halves
    the gap between the best sustained and the first failed rate `refinements` times.
    """
    good, bad = 0, None
    rate = start_rate
    while bad is None:
        result = run_probe(rate)
        yield result
        if result.publisher_bound:
            return
        if result.sustained:
            good, rate = rate, rate * 2
        else:
            bad = rate
    for _ in range(refinements):
        rate = (good + bad) // 2
        result = run_probe(rate)
        yield result
        if result.publisher_bound:
            return
        if result.sustained:
            good = rate
        else:
            bad = rate


def summarize(probes: list[Probe]) -> dict[str, object]:
    """The highest sustained rate of a search, whether the publisher capped it, and its probes."""
    sustained = [p.rate for p in probes if p.sustained and not p.publisher_bound]
    return {
        "max_sustained_rate": max(sustained, default=0),
        "publisher_bound": any(p.publisher_bound for p in probes),
        "probes": [asdict(p) for p in probes],
    }


def _slope(points: list[tuple[float, int]]) -> float:
    if len(points) < 2:
        return 0.0
    times = [t for t, _ in points]
    values = [v for _, v in points]
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def _publish(
    bootstrap_servers: str, stream: str, rate: int, seconds: float, payloads: Payloads, ids: str
) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "compression.type": "lz4"}
    )
    per_tick = max(1, rate // _TICKS_PER_S)
    started = time.monotonic()
    number = 0
    while (now := time.monotonic() - started) < seconds:
        due = int(now * rate) + per_tick
        while number < due:
            for offset, value in enumerate(payloads(number, per_tick)):
                while True:
                    try:
                        producer.produce(stream, value, headers={"id": f"{ids}:{number + offset}"})
                        break
                    except BufferError:
                        producer.poll(0.05)
            number += per_tick
        producer.poll(0)
        time.sleep(max(0.0, (number / rate) - (time.monotonic() - started)))
    producer.flush(30)
