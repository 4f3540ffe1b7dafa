"""One micro-batch of the execution core: inputs, late records, copies, monoids, failures."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

from functools import reduce
from typing import Any

import pytest

from millrace import Input, Processor, ValueState
from millrace.errors import ProcessorError
from millrace.processor.execution import fold, run_batch, run_key, watermark_after
from millrace.records import Record
from millrace.testing import ProcessorTester

T0 = 1_767_225_600_000


class Spikes(Processor):
    """MillWheel figure 3: model updates and window counts, keyed differently, one processor."""

    name = "spikes"
    inputs = [
        Input("model_updates", key="query", time="at"),
        Input("window_counts", key=lambda record: record["search"]["text"], time="ts"),
    ]
    expected = ValueState(int)

    def on_record(self, key, record, ctx):
        if ctx.stream == "model_updates":
            self.expected.set(record["expected"])
        elif record["count"] > 2 * self.expected.get(0):
            ctx.produce("anomalies", {"query": key, "count": record["count"]})


def test_several_inputs_with_their_own_key_extractors_meet_at_one_key() -> None:
    tester = ProcessorTester(Spikes)
    tester.feed("model_updates", [{"query": "cats", "expected": 10, "at": T0}])
    tester.feed(
        "window_counts",
        [
            {"search": {"text": "cats"}, "count": 15, "ts": T0},
            {"search": {"text": "cats"}, "count": 25, "ts": T0},
            {"search": {"text": "dogs"}, "count": 1, "ts": T0},
        ],
    )
    tester.run_batch()

    assert tester.values("anomalies") == [
        {"query": "cats", "count": 25},
        {"query": "dogs", "count": 1},
    ]


def test_the_watermark_is_the_slowest_bucket_s_latest_time_minus_its_input_s_lateness() -> None:
    class TwoInputs(Processor):
        name = "two_inputs"
        inputs = [
            Input("fast", key="k", time="ts", lateness="1s"),
            Input("slow", key="k", time="ts", lateness="10s"),
        ]

        def on_record(self, key, record, ctx):
            pass

    assert watermark_after(TwoInputs, {}, None) is None
    assert watermark_after(TwoInputs, {("fast", 0): T0}, None) == T0 - 1_000
    assert watermark_after(TwoInputs, {("fast", 0): T0, ("slow", 0): T0}, None) == T0 - 10_000
    # A bucket far ahead does not move the watermark past the other bucket of its stream.
    assert watermark_after(TwoInputs, {("fast", 0): T0, ("fast", 1): T0 + 60_000}, None) == (
        T0 - 1_000
    )
    assert watermark_after(TwoInputs, {("fast", 0): T0, ("slow", 0): T0}, T0) == T0


class Tally(Processor):
    """Counts the records of each key, with five seconds of lateness."""

    name = "tally"
    inputs = [Input("events", key="k", time="ts", lateness="5s")]
    total = ValueState(int)

    def on_record(self, key, record, ctx):
        self.total.set(self.total.get(0) + 1)


def test_records_behind_the_watermark_are_not_processed_and_are_counted_late() -> None:
    tester = ProcessorTester(Tally)
    tester.feed("events", [{"k": "a", "ts": T0 + 10_000}])
    tester.run_batch()
    assert tester.watermark_ms == T0 + 5_000

    on_time = {"k": "a", "ts": T0 + 5_000}
    late = {"k": "a", "ts": T0 + 4_999}
    tester.feed("events", [late, on_time])
    outcome = tester.run_batch()

    assert [record.value for record in outcome.late] == [late]
    assert [record.value for record in tester.late] == [late]
    assert tester.state("a") == {"total": 2}


def test_a_record_dated_before_1970_is_a_dead_letter_even_when_errors_stop_the_app() -> None:
    tester = ProcessorTester(Tally)
    tester.feed("events", [{"k": "a", "ts": -1}, {"k": "a", "ts": T0}])

    outcome = tester.run_batch()

    assert [(letter.key, letter.error) for letter in outcome.dead_letters] == [
        (
            "a",
            "event time 1969-12-31T23:59:59.000Z is before 1970-01-01, which Spark cannot "
            "place in event time",
        )
    ]
    assert outcome.late == [] and tester.state("a") == {"total": 1}


def event(record_id: str, offset: int, time_ms: int, key: str = "a") -> Record:
    """A record of `events` with its own id, as a millrace writer gives it."""
    return Record("events", 0, offset, None, record_id, None, {"k": key, "ts": time_ms})


def test_a_copy_of_a_processed_record_is_dropped_in_the_same_batch_and_later_ones() -> None:
    tester = ProcessorTester(Tally)
    tester.feed("events", [event("r1", 0, T0 + 10_000), event("r1", 1, T0 + 10_000)])
    first = tester.run_batch()
    tester.feed("events", [event("r1", 2, T0 + 10_000), event("r2", 3, T0 + 10_000)])
    second = tester.run_batch()

    assert tester.state("a") == {"total": 2}
    assert [record.offset for record in first.duplicates] == [1]
    assert [record.offset for record in second.duplicates] == [2]
    assert [record.offset for record in tester.duplicates] == [1, 2]


def test_an_id_is_forgotten_once_the_watermark_passes_it_and_a_later_copy_is_late() -> None:
    tester = ProcessorTester(Tally)
    tester.feed("events", [event("r1", 0, T0 + 10_000)])
    tester.run_batch()
    tester.feed("events", [event("r2", 1, T0 + 20_000)])
    tester.run_batch()
    assert tester.watermark_ms == T0 + 15_000

    tester.feed("events", [event("r1", 2, T0 + 10_000)])
    outcome = tester.run_batch()

    assert [record.offset for record in outcome.late] == [2]
    assert outcome.duplicates == []
    assert tester.state("a") == {"total": 2}


def test_a_key_s_remembered_ids_do_not_outlive_the_watermark() -> None:
    remembered = {"a": {"state": {"total": [1, 0]}, "seen": {"r1": T0, "r2": T0 + 9_000}}}
    outcome = run_batch(Tally(), remembered, [], watermark_ms=T0 + 5_000, processing_time_ms=0)
    assert outcome.states["a"] == {"state": {"total": [1, 0]}, "seen": {"r2": T0 + 9_000}}

    idle = {"b": {"seen": {"r3": T0}}}
    outcome = run_batch(Tally(), idle, [], watermark_ms=T0 + 5_000, processing_time_ms=0)
    assert outcome.states == {"b": None}


def test_at_least_once_processes_every_copy() -> None:
    class AtLeastOnce(Tally):
        name = "tally_at_least_once"
        semantics = "at_least_once"

    tester = ProcessorTester(AtLeastOnce)
    tester.feed("events", [event("r1", 0, T0), event("r1", 1, T0)])
    outcome = tester.run_batch()

    assert tester.state("a") == {"total": 2}
    assert outcome.duplicates == []


def test_records_of_one_batch_are_never_late_for_each_other() -> None:
    tester = ProcessorTester(Spikes)
    tester.feed("model_updates", [{"query": "q", "expected": 1, "at": T0 + 60_000}])
    tester.feed("model_updates", [{"query": "q", "expected": 2, "at": T0}])
    outcome = tester.run_batch()

    assert outcome.late == []
    assert tester.state("q") == {"expected": 2}


class Sum(Processor):
    """A monoid: per key, the sum and count of amounts, and the largest amount."""

    name = "sum"
    inputs = [Input("payments", key="user", time="ts")]
    zero: dict[str, Any] = {"sum": 0, "count": 0, "max": None}

    def lift(self, record):
        return {"sum": record["amount"], "count": 1, "max": record["amount"]}

    def combine(self, a, b):
        biggest = [value for value in (a["max"], b["max"]) if value is not None]
        return {
            "sum": a["sum"] + b["sum"],
            "count": a["count"] + b["count"],
            "max": max(biggest) if biggest else None,
        }

    def on_aggregate(self, key, aggregate, ctx):
        ctx.produce("totals", {"user": key, **aggregate})


PAYMENTS = [
    [{"user": "ann", "amount": 5, "ts": T0}, {"user": "bob", "amount": 1, "ts": T0}],
    [{"user": "ann", "amount": 7, "ts": T0}, {"user": "ann", "amount": 2, "ts": T0}],
    [{"user": "bob", "amount": 9, "ts": T0}],
]


def test_monoid_pre_aggregation_equals_folding_record_by_record() -> None:
    tester = ProcessorTester(Sum)
    for batch in PAYMENTS:
        tester.feed("payments", batch)
        tester.run_batch()

    everything = [record for batch in PAYMENTS for record in batch]
    for user in ("ann", "bob"):
        amounts = [record["amount"] for record in everything if record["user"] == user]
        expected = {"sum": sum(amounts), "count": len(amounts), "max": max(amounts)}
        by_records = reduce(
            lambda a, r: Sum().combine(a, Sum().lift(r)),
            [r for r in everything if r["user"] == user],
            Sum.zero,
        )
        assert tester.state(user) == {"aggregate": expected}
        assert by_records == expected
    assert fold(Sum(), PAYMENTS[1]) == {"sum": 9, "count": 2, "max": 7}


def test_a_monoid_emits_once_per_key_per_batch_with_the_new_aggregate() -> None:
    tester = ProcessorTester(Sum)
    for batch in PAYMENTS:
        tester.feed("payments", batch)
        tester.run_batch()

    assert [(value["user"], value["sum"]) for value in tester.values("totals")] == [
        ("ann", 5),
        ("bob", 1),
        ("ann", 14),
        ("bob", 10),
    ]


def test_a_monoid_combines_the_stored_aggregate_once_with_the_batch_s_partial() -> None:
    combined_with_stored = []

    class Watched(Processor):
        name = "watched"
        inputs = [Input("events", key="k", time="ts")]
        zero = 0
        aggregate = ValueState(int)

        def lift(self, record):
            return 1

        def combine(self, a, b):
            if a >= 1000:  # in this test, only the stored aggregate is this large
                combined_with_stored.append((a, b))
            return a + b

    batch = [Record("events", 0, n, None, None, T0, {"k": "a"}) for n in range(50)]
    outcome = run_key(
        Watched(),
        "a",
        {"state": {"aggregate": [1000, 0]}},
        batch,
        watermark_ms=None,
        processing_time_ms=7,
    )

    assert combined_with_stored == [(1000, 50)]
    assert outcome.state == {"state": {"aggregate": [1050, 7]}}


def test_a_monoid_folds_each_record_once_whatever_its_copies() -> None:
    copies = [
        Record("payments", 0, offset, None, f"p{offset % 2}", None, value)
        for offset, value in enumerate(
            [{"user": "ann", "amount": 5, "ts": T0}, {"user": "ann", "amount": 7, "ts": T0}] * 2
        )
    ]
    tester = ProcessorTester(Sum)
    tester.feed("payments", copies)
    tester.run_batch()

    assert tester.state("ann") == {"aggregate": {"sum": 12, "count": 2, "max": 7}}
    assert len(tester.duplicates) == 2


def test_a_failing_callback_stops_the_batch_naming_processor_key_and_record() -> None:
    class Divide(Processor):
        name = "divide"
        inputs = [Input("events", key="k", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.produce("out", {"x": 1 / record["d"]})

    record = Record("events", 3, 41, None, "r-41", None, {"k": "a", "d": 0, "ts": T0})
    with pytest.raises(ProcessorError) as raised:
        run_batch(Divide(), {}, [record], watermark_ms=None, processing_time_ms=0)

    message = raised.value.message
    assert "processor 'divide' failed on key 'a'" in message
    assert "stream 'events', bucket 3, offset 41" in message
    assert "ZeroDivisionError: division by zero" in message
    assert "restart" in raised.value.hint and "on_error = 'dlq'" in raised.value.hint
    assert isinstance(raised.value.__cause__, ZeroDivisionError)


class Careful(Processor):
    """Counts and produces, then fails on poisoned records after changing state and timers."""

    name = "careful"
    inputs = [Input("events", key="k", time="ts")]
    on_error = "dlq"
    seen = ValueState(list[int])

    def on_record(self, key, record, ctx):
        self.seen.set([*self.seen.get([]), record["n"]])
        ctx.produce("out", {"n": record["n"]})
        ctx.set_timer(f"t{record['n']}", processing_time_ms=10**15)
        if record.get("poison"):
            raise ValueError(f"poisoned {record['n']}")


def test_with_dlq_a_failing_record_is_dead_lettered_and_its_effects_undone() -> None:
    tester = ProcessorTester(Careful)
    tester.feed(
        "events",
        [
            {"k": "a", "n": 1, "ts": T0},
            {"k": "a", "n": 2, "ts": T0, "poison": True},
            {"k": "a", "n": 3, "ts": T0},
        ],
    )
    tester.run_batch()

    assert tester.state("a") == {"seen": [1, 3]}
    assert tester.values("out") == [{"n": 1}, {"n": 3}]
    assert [timer.tag for timer in tester.timers("a")] == ["t1", "t3"]
    (letter,) = tester.dead_letters
    assert (letter.processor, letter.key, letter.error) == (
        "careful",
        "a",
        "ValueError: poisoned 2",
    )
    assert letter.record.value["n"] == 2 and letter.record.offset == 1


def test_with_dlq_a_record_whose_key_cannot_be_read_is_dead_lettered() -> None:
    tester = ProcessorTester(Careful)
    tester.feed("events", [{"n": 1, "ts": T0}, {"k": "a", "n": 2}, {"k": "a", "n": 3, "ts": T0}])
    tester.run_batch()

    assert [letter.error for letter in tester.dead_letters] == [
        "a record of 'events' has no key column 'k'",
        "a record of 'events' has no event time in column 'ts'",
    ]
    assert tester.state("a") == {"seen": [3]}


def test_with_dlq_a_failing_monoid_record_is_left_out_of_the_aggregate() -> None:
    class Strict(Sum):
        name = "strict"
        on_error = "dlq"

        def lift(self, record):
            if record["amount"] < 0:
                raise ValueError("negative amount")
            return super().lift(record)

    tester = ProcessorTester(Strict)
    tester.feed(
        "payments",
        [
            {"user": "ann", "amount": 5, "ts": T0},
            {"user": "ann", "amount": -1, "ts": T0},
            {"user": "ann", "amount": 2, "ts": T0},
        ],
    )
    tester.run_batch()

    assert tester.state("ann") == {"aggregate": {"sum": 7, "count": 2, "max": 5}}
    assert [letter.error for letter in tester.dead_letters] == ["ValueError: negative amount"]


def test_with_dlq_a_failing_timer_is_dead_lettered_once_and_its_effects_undone() -> None:
    class Closing(Processor):
        name = "closing"
        inputs = [Input("events", key="k", time="ts")]
        on_error = "dlq"
        closed = ValueState(bool)

        def on_record(self, key, record, ctx):
            ctx.set_timer("close", processing_time_ms=10)

        def on_timer(self, key, timer, ctx):
            self.closed.set(True)
            ctx.produce("closed", {"key": key})
            raise RuntimeError("cannot close")

    tester = ProcessorTester(Closing)
    tester.feed("events", [{"k": "a", "ts": T0}])
    tester.run_batch()
    tester.advance_clock(10)
    tester.fire_timers()
    tester.fire_timers()

    (letter,) = tester.dead_letters
    assert (letter.key, letter.timer.tag, letter.error) == (
        "a",
        "close",
        "RuntimeError: cannot close",
    )
    assert tester.values("closed") == []
    assert tester.state("a") == {"closed": None}
    assert tester.timers("a") == []
