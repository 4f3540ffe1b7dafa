"""A processor's event-time timers fire by its inputs' low watermark: a skewed backlog loses
nothing, a record from a wrong clock is a dead letter, and a quiet input still fires its last
timer (millrace.engine.low_watermark through millrace.apps.processors.streaming)."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

from pyspark.sql import SparkSession

from millrace import Input, MapState, Processor
from millrace.apps.processors.streaming import start_processor_app
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.engine.low_watermark import TICK_EVERY_S
from tests.micro_batches import longest_batch_ms
from tests.plain_producer import plain_producer

T0 = 1_767_225_600_000
WINDOW_MS = 10_000


def ten_second_counter(stream: str, output: str, **input_options: str) -> type[Processor]:
    """Counts each key's records per 10 seconds of event time, produced when the window closes."""

    class TenSecondCounter(Processor):
        name = f"ten_second_counter_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream, key="key", time="ts", **input_options)]
        counts = MapState(key=int, value=int)

        def on_record(self, key, record, ctx):
            window = ctx.event_time_ms // WINDOW_MS * WINDOW_MS
            self.counts[window] = self.counts.get(window, 0) + 1
            ctx.set_timer(f"close-{window}", event_time_ms=window + WINDOW_MS)

        def on_timer(self, key, timer, ctx):
            window = timer.time_ms - WINDOW_MS
            count = self.counts.pop(window)
            ctx.produce(output, {"key": key, "window": window, "count": count}, time_ms=window)

    return TenSecondCounter


def publish(workspace: Workspace, stream: str, records: list[tuple[int, dict]]) -> None:
    """Each (bucket, event) to its bucket of `stream`, in order."""
    producer = plain_producer(workspace.settings)
    failures = []
    for bucket, event in records:
        producer.produce(
            stream,
            json.dumps(event),
            partition=bucket,
            on_delivery=lambda error, _: failures.append(error) if error else None,
        )
    producer.flush()
    assert not failures


def produced_counts(workspace: Workspace, output: str) -> Counter:
    return Counter(
        {
            (record.value["key"], record.value["window"]): record.value["count"]
            for record in tail(output, TailStart(from_beginning=True), settings=workspace.settings)
        }
    )


def python_counts(events: list[dict]) -> Counter:
    return Counter((event["key"], event["ts"] // WINDOW_MS * WINDOW_MS) for event in events)


def streams(workspace: Workspace, stream: str, buckets: int) -> str:
    output = f"{stream}.counts"
    create_stream(workspace.settings, stream, buckets=buckets)
    create_stream(workspace.settings, output, buckets=1)
    return output


def test_a_skewed_backlog_in_capped_micro_batches_loses_nothing_and_equals_plain_python(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = streams(workspace, stream_name, buckets=4)
    # Bucket 0 at 80 events a second of event time, then 20; bucket 1 at 1; bucket 2 at 10
    # then 40; bucket 3 at 5: read 1,000 at a time, the buckets run minutes apart.
    rates = {0: (80, 20), 1: (1, 1), 2: (10, 40), 3: (5, 5)}
    records = []
    for bucket, (first, second) in rates.items():
        for second_of_run in range(120):
            rate = first if second_of_run < 60 else second
            for n in range(rate):
                event = {
                    "key": f"k{(bucket + n) % 5}",
                    "ts": T0 + second_of_run * 1000 + n * 1000 // rate,
                }
                records.append((bucket, event))
    events = [event for _, event in records]
    # Ahead of every window in every bucket: the watermark is the least over the buckets.
    closing_ms = T0 + 120_000 + 30_000 + WINDOW_MS
    closing = [(bucket, {"key": "zz_closing", "ts": closing_ms}) for bucket in rates]
    publish(workspace, stream_name, records + closing)
    processor = ten_second_counter(stream_name, output, lateness="30s")

    running = start_processor_app(
        spark, workspace, processor, available_now=True, max_records_per_batch=1000
    )
    running.await_termination()

    assert running.late == 0
    assert produced_counts(workspace, output) == python_counts(events)


def test_a_record_from_a_wrong_clock_is_a_dead_letter_and_costs_no_other_record(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = streams(workspace, stream_name, buckets=1)
    good = [{"key": f"k{n % 3}", "ts": T0 + 10 * n} for n in range(2000)]
    wrong = {"key": "k0", "ts": "2100-01-01T00:00:00Z"}
    closing = {"key": "zz_closing", "ts": T0 + 60_000}
    publish(workspace, stream_name, [(0, e) for e in [*good[:1000], wrong, *good[1000:], closing]])
    processor = ten_second_counter(stream_name, output, lateness="30s")

    running = start_processor_app(
        spark, workspace, processor, available_now=True, max_records_per_batch=500
    )
    running.await_termination()

    assert running.late == 0
    assert produced_counts(workspace, output) == python_counts(good)
    [letter] = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=workspace.settings
    )
    assert letter.value["error"].startswith("event time 2100-01-01T00:00:00.000Z is ")
    assert letter.value["error"].endswith("more than max_future (300000 ms)")
    assert running.dead_letters == 1


def test_the_last_timer_of_a_quiet_input_fires_within_the_idle_timeout_and_lateness(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = streams(workspace, stream_name, buckets=2)
    processor = ten_second_counter(stream_name, output, lateness="2s", idle_timeout="3s")
    producer = plain_producer(workspace.settings)
    running = start_processor_app(spark, workspace, processor)
    try:
        # A first record, and the app's first micro-batch, before the clock starts.
        first = {"key": "k0", "ts": int(time.time() * 1000)}
        producer.produce(stream_name, json.dumps(first), partition=0)
        producer.flush()
        running.process_all_available()
        sent = [first]
        for n in range(12):
            event = {"key": f"k{n % 2}", "ts": int(time.time() * 1000)}
            producer.produce(stream_name, json.dumps(event), partition=0)
            producer.flush()
            sent.append(event)
            time.sleep(0.25)
        last_ms = sent[-1]["ts"]
        last_window = last_ms // WINDOW_MS * WINDOW_MS
        expected = python_counts(sent)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (sent[-1]["key"], last_window) in produced_counts(workspace, output):
                break
            time.sleep(0.5)
        seen_ms = time.time() * 1000
        # Due once the wall clock is past the window's end by the lateness and past the last
        # record by the idle timeout; their sum bounds it.
        due_ms = last_window + WINDOW_MS + 2_000 + 3_000
        # Then come: the micro-batch running, the ticker's wait (a tick period) for the one
        # after it, the micro-batch that reads the tick and moves the watermark on, the one
        # that fires the timer, and this loop's wait. A processor's micro-batch takes a second
        # or two here and several on a busy machine, so the bound counts micro-batches.
        longest_ms = longest_batch_ms([running.query], due_ms, seen_ms)
        assert seen_ms - due_ms <= TICK_EVERY_S * 1000 + 4 * longest_ms + 1_000
        assert produced_counts(workspace, output) == expected
        assert running.late == 0
    finally:
        running.stop()
