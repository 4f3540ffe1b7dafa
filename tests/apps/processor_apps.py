"""Processor apps for the tests of processors on Spark, streaming, in batch and backfilled:
the WindowCounter of docs/processor.md with its input and its counts in plain Python, and an
echo that fails on one query."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

import uuid
from collections import Counter

from millrace import Input, MapState, Processor
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.config.workspace import Workspace
from millrace.records import Record

T0 = 1_767_225_600_000
LATENESS_MS = 10_000
QUERIES = ["cats", "dogs", "fish", "owls"]


def window_counter(stream: str, output: str) -> type[Processor]:
    """The WindowCounter of docs/processor.md, reading `stream` and producing to `output`."""

    class WindowCounter(Processor):
        name = f"window_counter_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream, key="query", time="ts", lateness="10s")]
        counts = MapState(key=int, value=int)

        def on_record(self, key, record, ctx):
            bucket = ctx.event_time_ms // 1000 * 1000
            self.counts[bucket] = self.counts.get(bucket, 0) + 1
            ctx.set_timer(f"close-{bucket}", event_time_ms=bucket + 1000)

        def on_timer(self, key, timer, ctx):
            bucket = timer.time_ms - 1000
            ctx.produce(
                output,
                {"query": key, "bucket": bucket, "count": self.counts.pop(bucket)},
                time_ms=bucket,
            )

    return WindowCounter


def queries(first: int, count: int) -> list[dict]:
    """Queries every 150 ms from record `first` on, a little out of order, never late."""
    return [
        {"query": QUERIES[n * 7 % len(QUERIES)], "ts": T0 + n * 150 - (n % 5) * 400}
        for n in range(first, first + count)
    ]


def closing(events: list[dict]) -> dict:
    """A record far enough ahead that the watermark passes every window of `events`."""
    return {"query": "closing", "ts": max(event["ts"] for event in events) + LATENESS_MS + 1000}


def publish(workspace: Workspace, stream: str, events: list[dict]) -> None:
    """Each event keyed by its query, so that a query's events stay in order in one bucket.

    Without a key the client spreads runs of events over the buckets at random, and with two
    buckets one can hold events seconds ahead of the other: Spark's watermark follows the
    furthest bucket, so the other's events would come behind it, late.
    """
    with Publisher(stream, settings=workspace.settings, time_field="ts") as publisher:
        for event in events:
            publisher.send(event, key=event["query"])


def read(workspace: Workspace, stream: str) -> list[Record]:
    return list(tail(stream, TailStart(from_beginning=True), settings=workspace.settings))


def window_counts(events: list[dict]) -> Counter:
    """Plain Python: records per query and one-second window."""
    return Counter((event["query"], event["ts"] // 1000 * 1000) for event in events)


def produced_counts(records: list[Record]) -> Counter:
    return Counter(
        {
            (record.value["query"], record.value["bucket"]): record.value["count"]
            for record in records
        }
    )


def failing_echo(stream: str, output: str, on_error: str) -> type[Processor]:
    """Produces each record again, and fails on the query 'boom'."""

    class FailingEcho(Processor):
        name = f"failing_echo_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream, key="query", time="ts")]

        def on_record(self, key, record, ctx):
            if key == "boom":
                raise ValueError("boom is not a query")
            ctx.produce(output, record)

    FailingEcho.on_error = on_error
    return FailingEcho


OLD_REASON = (
    "event time 1969-12-31T23:59:59.000Z is before 1970-01-01, which Spark cannot place in "
    "event time"
)
