"""Timers: tags, replacing and deleting, event vs processing time, firing order."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

from typing import ClassVar

import pytest

from millrace import Input, Processor
from millrace.errors import ProcessorError
from millrace.processor.timers import KeyTimers, Timer
from millrace.testing import ProcessorTester

T0 = 1_767_225_600_000


class Alarms(Processor):
    """Sets the timers its records ask for and produces each firing."""

    name = "alarms"
    inputs = [Input("commands", key="k", time="ts")]

    def on_record(self, key, record, ctx):
        if record.get("delete"):
            ctx.delete_timer(record["tag"])
        elif "event_time" in record:
            ctx.set_timer(record["tag"], event_time_ms=record["event_time"])
        else:
            ctx.set_timer(record["tag"], processing_time_ms=record["processing_time"])

    def on_timer(self, key, timer, ctx):
        ctx.produce(
            "fired",
            {"key": key, "tag": timer.tag, "time": timer.time_ms, "domain": timer.domain},
        )


def fired(tester: ProcessorTester) -> list[tuple[str, int]]:
    return [(value["tag"], value["time"]) for value in tester.values("fired")]


def test_event_time_timers_fire_once_the_watermark_reaches_them_in_time_order() -> None:
    tester = ProcessorTester(Alarms)
    tester.feed(
        "commands",
        [
            {"k": "a", "ts": T0, "tag": "late", "event_time": T0 + 300},
            {"k": "a", "ts": T0, "tag": "early", "event_time": T0 + 100},
            {"k": "a", "ts": T0, "tag": "b-tie", "event_time": T0 + 200},
            {"k": "a", "ts": T0, "tag": "a-tie", "event_time": T0 + 200},
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 199)
    tester.fire_timers()
    assert fired(tester) == [("early", T0 + 100)]

    tester.advance_watermark(T0 + 300)
    tester.fire_timers()
    assert fired(tester) == [
        ("early", T0 + 100),
        ("a-tie", T0 + 200),
        ("b-tie", T0 + 200),
        ("late", T0 + 300),
    ]
    assert tester.timers("a") == []


def test_the_watermark_moves_from_the_event_times_seen_between_micro_batches() -> None:
    tester = ProcessorTester(Alarms)
    tester.feed("commands", [{"k": "a", "ts": T0 + 5000, "tag": "t", "event_time": T0 + 5000}])
    tester.run_batch()
    assert fired(tester) == []  # the watermark reached T0 + 5000 only after that batch

    tester.fire_timers()
    assert fired(tester) == [("t", T0 + 5000)]


def test_processing_time_timers_fire_on_the_clock_not_the_watermark() -> None:
    tester = ProcessorTester(Alarms, clock_ms=1_000)
    tester.feed("commands", [{"k": "a", "ts": T0, "tag": "idle", "processing_time": 31_000}])
    tester.run_batch()
    tester.advance_watermark(T0 + 10**9)
    tester.fire_timers()
    assert fired(tester) == []

    tester.advance_clock(31_000)
    tester.fire_timers()
    assert tester.values("fired") == [
        {"key": "a", "tag": "idle", "time": 31_000, "domain": "processing_time"}
    ]


def test_one_processor_may_use_both_kinds_of_timer() -> None:
    tester = ProcessorTester(Alarms, clock_ms=0)
    tester.feed(
        "commands",
        [
            {"k": "a", "ts": T0, "tag": "window", "event_time": T0 + 1000},
            {"k": "a", "ts": T0, "tag": "idle", "processing_time": 60_000},
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 1000)
    tester.fire_timers()
    tester.advance_clock(60_000)
    tester.fire_timers()

    assert [value["domain"] for value in tester.values("fired")] == [
        "event_time",
        "processing_time",
    ]


def test_setting_a_tag_again_replaces_its_timer_whatever_its_kind() -> None:
    tester = ProcessorTester(Alarms)
    tester.feed(
        "commands",
        [
            {"k": "a", "ts": T0, "tag": "t", "event_time": T0 + 100},
            {"k": "a", "ts": T0, "tag": "t", "event_time": T0 + 500},
            {"k": "a", "ts": T0, "tag": "u", "event_time": T0 + 100},
            {"k": "a", "ts": T0, "tag": "u", "processing_time": 10**15},
        ],
    )
    tester.run_batch()
    assert tester.timers("a") == [
        Timer("t", T0 + 500, "event_time"),
        Timer("u", 10**15, "processing_time"),
    ]

    tester.advance_watermark(T0 + 500)
    tester.fire_timers()
    assert fired(tester) == [("t", T0 + 500)]


def test_a_deleted_timer_never_fires() -> None:
    tester = ProcessorTester(Alarms)
    tester.feed(
        "commands",
        [
            {"k": "a", "ts": T0, "tag": "t", "event_time": T0 + 100},
            {"k": "a", "ts": T0, "tag": "t", "delete": True},
            {"k": "a", "ts": T0, "tag": "never-set", "delete": True},
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 1000)
    tester.fire_timers()

    assert fired(tester) == []
    assert tester.run_batch().states == {}  # the key holds nothing any more


def test_timers_are_per_key() -> None:
    tester = ProcessorTester(Alarms)
    tester.feed(
        "commands",
        [
            {"k": "a", "ts": T0, "tag": "t", "event_time": T0 + 100},
            {"k": "b", "ts": T0, "tag": "t", "event_time": T0 + 200},
        ],
    )
    tester.run_batch()
    tester.advance_watermark(T0 + 1000)
    tester.fire_timers()

    assert sorted((value["key"], value["time"]) for value in tester.values("fired")) == [
        ("a", T0 + 100),
        ("b", T0 + 200),
    ]


class Chain(Processor):
    """Each firing sets the next timer one step later, up to a limit, to test re-arming."""

    name = "chain"
    inputs = [Input("starts", key="k", time="ts")]
    step: ClassVar[int] = 100

    def on_record(self, key, record, ctx):
        ctx.set_timer("next", event_time_ms=record["first"])

    def on_timer(self, key, timer, ctx):
        ctx.produce("fired", {"time": timer.time_ms})
        if timer.time_ms < ctx.watermark_ms + 1000:
            ctx.set_timer("next", event_time_ms=timer.time_ms + self.step)


def test_a_timer_set_while_firing_that_is_already_due_fires_in_the_same_pass() -> None:
    tester = ProcessorTester(Chain)
    tester.feed("starts", [{"k": "a", "ts": T0, "first": T0 - 1000}])
    tester.advance_watermark(T0 - 1000)
    tester.run_batch()

    times = [value["time"] for value in tester.values("fired")]
    # due while the watermark is T0 - 1000: only the first; the re-armed one waits
    assert times == [T0 - 1000]

    tester.advance_watermark(T0)
    tester.fire_timers()
    times = [value["time"] for value in tester.values("fired")]
    assert times == list(range(T0 - 1000, T0 + 1, 100))
    assert tester.timers("a") == [Timer("next", T0 + 100, "event_time")]


def test_a_timer_that_keeps_re_arming_itself_as_due_is_stopped_with_a_clear_error() -> None:
    class Loop(Processor):
        name = "loop"
        inputs = [Input("starts", key="k", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.set_timer("again", processing_time_ms=0)

        def on_timer(self, key, timer, ctx):
            ctx.set_timer("again", processing_time_ms=0)

    tester = ProcessorTester(Loop)
    tester.feed("starts", [{"k": "a", "ts": T0}])

    with pytest.raises(ProcessorError, match="fired 10000 timers for key 'a'") as raised:
        tester.run_batch()
    assert "already due" in raised.value.hint


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "needs exactly one of event_time_ms and processing_time_ms"),
        ({"event_time_ms": 1, "processing_time_ms": 1}, "needs exactly one"),
        ({"event_time_ms": "soon"}, "is not epoch milliseconds"),
    ],
)
def test_a_timer_needs_one_time_in_epoch_milliseconds(arguments: dict, message: str) -> None:
    class Bad(Processor):
        name = "bad"
        inputs = [Input("starts", key="k", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.set_timer("t", **arguments)

    tester = ProcessorTester(Bad)
    tester.feed("starts", [{"k": "a", "ts": T0}])
    with pytest.raises(ProcessorError, match=message):
        tester.run_batch()


def test_a_processor_that_sets_timers_without_on_timer_is_told_to_define_it() -> None:
    class NoHandler(Processor):
        name = "no_handler"
        inputs = [Input("starts", key="k", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.set_timer("t", processing_time_ms=0)

    tester = ProcessorTester(NoHandler)
    tester.feed("starts", [{"k": "a", "ts": T0}])
    with pytest.raises(ProcessorError, match="defines no on_timer"):
        tester.run_batch()


def test_stored_timers_round_trip_and_list_in_firing_order() -> None:
    timers = KeyTimers(
        {"b": ["event_time", 5], "a": ["processing_time", 5], "c": ["event_time", 1]}
    )
    assert [timer.tag for timer in timers.pending()] == ["c", "a", "b"]
    assert KeyTimers(timers.stored()).pending() == timers.pending()
    assert timers.pop_next_due(watermark_ms=None, processing_time_ms=5) == Timer(
        "a", 5, "processing_time"
    )
