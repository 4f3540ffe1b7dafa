"""Processing-time timers on Spark (millrace.apps.processors.wakeups through
millrace.apps.processors.streaming): mixed with event-time timers in one processor, they fire
with no further record, once, across a restart, and give what ProcessorTester gives; the driver's
clock wakes every bucket when it starts, then each reported bucket once when its time comes."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import pytest
from pyspark.sql import SparkSession

from millrace import Input, MapState, Processor, ValueState
from millrace.apps.processors.placement import Placement
from millrace.apps.processors.streaming import start_processor_app
from millrace.apps.processors.wakeups import ProcessorClock, clock_stream
from millrace.bus.internal import create_internal_stream, read_after
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.records import Record
from millrace.testing import ProcessorTester
from tests.plain_producer import plain_producer

T0 = 1_767_225_600_000
WINDOW_MS = 10_000
IDLE_MS = 3_000
# Long enough for the app to stop before it, however slow a micro-batch of this machine.
LONG_IDLE_MS = 30_000


def sessions_and_windows(stream: str, output: str) -> type[Processor]:
    """Closes a user's session after `IDLE_MS` of wall-clock quiet, or the `idle_ms` its last
    record asks for (a processing-time timer), and counts the user's records per 10 seconds
    of event time (event-time timers)."""

    class SessionsAndWindows(Processor):
        name = f"sessions_and_windows_{uuid.uuid4().hex[:8]}"
        # No idle ticks within a test: the watermark moves with the records only.
        inputs = [Input(stream, key="user", time="ts", idle_timeout="1h")]
        session = ValueState(list[int])
        counts = MapState(key=int, value=int)

        def on_record(self, key, record, ctx):
            self.session.set([*self.session.get([]), record["ts"]])
            idle_ms = record.get("idle_ms", IDLE_MS)
            ctx.set_timer("idle", processing_time_ms=ctx.processing_time_ms + idle_ms)
            window = ctx.event_time_ms // WINDOW_MS * WINDOW_MS
            self.counts[window] = self.counts.get(window, 0) + 1
            ctx.set_timer(f"close-{window}", event_time_ms=window + WINDOW_MS)

        def on_timer(self, key, timer, ctx):
            if timer.domain == "processing_time":
                times = self.session.get()
                self.session.clear()
                ctx.produce(output, {"user": key, "session": times}, time_ms=max(times))
            else:
                window = timer.time_ms - WINDOW_MS
                count = self.counts.pop(window)
                ctx.produce(output, {"user": key, "window": window, "count": count}, time_ms=window)

    return SessionsAndWindows


FIRST = [
    {"user": "ann", "ts": T0 + 1_000},
    {"user": "bob", "ts": T0 + 3_000},
    {"user": "ann", "ts": T0 + 2_000},
    {"user": "ann", "ts": T0 + 12_000},
    {"user": "bob", "ts": T0 + 15_000},
]
# They move the watermark past the second window of ann and bob.
BEFORE_RESTART = [
    {"user": "cid", "ts": T0 + 21_000, "idle_ms": LONG_IDLE_MS},
    {"user": "cid", "ts": T0 + 22_000, "idle_ms": LONG_IDLE_MS},
]


@dataclass
class Run:
    """What the scenario of `run` saw."""

    processor: type[Processor]
    output: str
    first_sessions_after_s: float
    before_restart: list[Record]
    after_restart: list[Record]


@pytest.fixture(scope="module")
def run(spark: SparkSession, workspace: Workspace) -> Run:
    """One app (started once: a Spark query's start is most of a test's time here) through
    the scenario: `FIRST`, then no record until two sessions close; `BEFORE_RESTART`, whose
    session is still open when the app stops; a restart, then no record until it closes."""
    stream = f"test.{uuid.uuid4().hex[:10]}"
    output = f"{stream}.out"
    create_stream(workspace.settings, stream, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    processor = sessions_and_windows(stream, output)
    running = start_processor_app(spark, workspace, processor, placement=Placement(4))
    try:
        publish(workspace, stream, FIRST)
        running.process_all_available()
        first_sessions_after_s = wait_for_sessions(workspace, output, 2, IDLE_MS / 1000 + 20)
        publish(workspace, stream, BEFORE_RESTART)
        running.process_all_available()
    finally:
        running.stop()
    before_restart = produced(workspace, output)
    running = start_processor_app(spark, workspace, processor, placement=Placement(4))
    try:
        wait_for_sessions(workspace, output, 3, LONG_IDLE_MS / 1000 + 30)
        # A few more micro-batches' time, for a second firing to show if there were one.
        time.sleep(2)
        running.process_all_available()
    finally:
        running.stop()
    return Run(
        processor, output, first_sessions_after_s, before_restart, produced(workspace, output)
    )


def publish(workspace: Workspace, stream: str, events: list[dict]) -> None:
    producer = plain_producer(workspace.settings)
    for event in events:
        producer.produce(stream, json.dumps(event), key=event["user"])
    producer.flush()


def produced(workspace: Workspace, output: str) -> list[Record]:
    return list(tail(output, TailStart(from_beginning=True), settings=workspace.settings))


def sessions(records: list[Record]) -> list[dict]:
    return [record.value for record in records if "session" in record.value]


def wait_for_sessions(workspace: Workspace, output: str, count: int, within_s: float) -> float:
    """Seconds until `output` holds `count` sessions; fails after `within_s`."""
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        if len(sessions(produced(workspace, output))) >= count:
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"no {count} sessions in {output} within {within_s} s")


def sorted_values(values: list[dict]) -> list[dict]:
    return sorted(values, key=lambda value: json.dumps(value, sort_keys=True))


def test_a_wall_clock_timer_fires_with_no_further_record(run: Run) -> None:
    # The idle timeout, then a wake-up and a micro-batch of this 2-core machine.
    assert run.first_sessions_after_s <= IDLE_MS / 1000 + 10
    assert sorted_values(sessions(run.before_restart)) == [
        {"user": "ann", "session": [T0 + 1_000, T0 + 2_000, T0 + 12_000]},
        {"user": "bob", "session": [T0 + 3_000, T0 + 15_000]},
    ]


def test_a_wall_clock_timer_pending_when_the_app_stops_fires_once_after_its_restart(
    run: Run,
) -> None:
    cid = {"user": "cid", "session": [T0 + 21_000, T0 + 22_000]}
    assert cid not in sessions(run.before_restart)
    assert sessions(run.after_restart).count(cid) == 1
    assert len({record.id for record in run.after_restart}) == len(run.after_restart)


def test_wall_clock_and_event_time_timers_give_on_spark_what_the_tester_gives(run: Run) -> None:
    stream = run.processor.inputs[0].stream
    tester = ProcessorTester(run.processor, clock_ms=T0)
    tester.feed(stream, FIRST)
    tester.run_batch()
    tester.fire_timers()
    tester.advance_clock(T0 + IDLE_MS)
    tester.fire_timers()
    tester.feed(stream, BEFORE_RESTART)
    tester.run_batch()
    tester.advance_clock(T0 + IDLE_MS + LONG_IDLE_MS)
    tester.fire_timers()

    expected = sorted_values(tester.values(run.output))
    assert sorted_values([record.value for record in run.after_restart]) == expected
    assert {"user": "ann", "window": T0 + WINDOW_MS, "count": 1} in expected
    assert len(expected) == 7


def test_the_clock_wakes_every_bucket_at_start_then_a_reported_bucket_once_when_due(
    workspace: Workspace,
) -> None:
    app = f"clock_{uuid.uuid4().hex[:8]}"
    create_internal_stream(workspace.settings, clock_stream(app))
    clock = ProcessorClock(workspace, app, buckets=3)
    try:
        assert woken(workspace, app, count=3) == [0, 1, 2]
        clock.report({1: int(time.time() * 1000) + 1_000, 2: None})
        # Bucket 1 once its time has come; bucket 0, never reported, is not woken again.
        assert woken(workspace, app, count=4)[3:] == [1]
        time.sleep(1.5)
        assert woken(workspace, app, count=4) == [0, 1, 2, 1]
    finally:
        clock.close()


def woken(workspace: Workspace, app: str, count: int) -> list[int]:
    """The buckets woken so far, once there are `count` wake-ups (within 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        records, _ = read_after(workspace.settings, clock_stream(app), {0: 0})
        if len(records) >= count or time.monotonic() > deadline:
            return [stamped.record.value["bucket"] for stamped in records]
        time.sleep(0.1)
