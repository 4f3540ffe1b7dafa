"""Productions: streams, values, keys, times, and ids that a re-run gives again."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

import pytest

from millrace import Input, Processor
from millrace.errors import ProcessorError
from millrace.processor.context import production_id
from millrace.testing import ProcessorTester

T0 = 1_767_225_600_000


class Fanout(Processor):
    """Produces each record twice to one stream and once to another; closes with a timer."""

    name = "fanout"
    inputs = [Input("events", key="user", time="ts")]

    def on_record(self, key, record, ctx):
        ctx.produce("copies", {"n": record["n"]})
        ctx.produce("copies", {"n": record["n"]}, key=key, time_ms=T0 + 7)
        ctx.produce("users", {"user": key})
        ctx.set_timer("close", event_time_ms=T0 + 1000)

    def on_timer(self, key, timer, ctx):
        ctx.produce("closed", {"user": key})


def run(records: list[dict]) -> ProcessorTester:
    tester = ProcessorTester(Fanout)
    tester.feed("events", records)
    tester.run_batch()
    tester.advance_watermark(T0 + 1000)
    tester.fire_timers()
    return tester


RECORDS = [{"user": "ann", "n": 1, "ts": T0}, {"user": "bob", "n": 2, "ts": T0 + 1}]


def test_a_callback_produces_to_any_number_of_streams() -> None:
    tester = run(RECORDS)

    assert tester.values("copies") == [{"n": 1}, {"n": 1}, {"n": 2}, {"n": 2}]
    assert tester.values("users") == [{"user": "ann"}, {"user": "bob"}]
    assert sorted(value["user"] for value in tester.values("closed")) == ["ann", "bob"]


def test_a_production_s_time_defaults_to_the_record_s_or_the_timer_s() -> None:
    tester = run(RECORDS)
    copies = tester.productions["copies"]

    assert [(p.key, p.time_ms) for p in copies] == [
        (None, T0),
        ("ann", T0 + 7),
        (None, T0 + 1),
        ("bob", T0 + 7),
    ]
    assert {p.time_ms for p in tester.productions["closed"]} == {T0 + 1000}


def test_running_the_same_input_again_gives_the_same_ids() -> None:
    first = run(RECORDS)
    second = run(RECORDS)

    def ids(tester: ProcessorTester) -> list[str]:
        return [p.id for stream in sorted(tester.productions) for p in tester.productions[stream]]

    assert ids(first) == ids(second)
    assert len(set(ids(first))) == len(ids(first)) == 8


def test_ids_differ_by_record_key_callback_and_index() -> None:
    tester = run(RECORDS)
    copies = tester.productions["copies"]
    other = run([{**RECORDS[0], "n": 99}, RECORDS[1]])

    assert copies[0].id != copies[1].id  # index within the callback
    assert copies[0].id != copies[2].id  # another record
    # ids come from what a production was computed from, not from its value
    assert other.productions["copies"][0].id == copies[0].id
    assert copies[0].id == production_id("fanout", "ann", ["record", "events/0/0"], 0)


def test_a_production_is_a_dict_sent_to_a_named_stream() -> None:
    class Bad(Processor):
        name = "bad"
        inputs = [Input("events", key="user", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.produce(record["stream"], record["value"])

    for stream, value, message in [
        ("out", [1], "got a list, not a dict"),
        ("", {}, "which is not a stream name"),
    ]:
        tester = ProcessorTester(Bad)
        tester.feed("events", [{"user": "a", "ts": T0, "stream": stream, "value": value}])
        with pytest.raises(ProcessorError, match=message):
            tester.run_batch()


def test_the_context_tells_the_record_s_stream_metadata_and_times() -> None:
    seen = []

    class Looking(Processor):
        name = "looking"
        inputs = [Input("events", key="user", time="ts")]

        def on_record(self, key, record, ctx):
            seen.append(
                (
                    ctx.key,
                    ctx.stream,
                    ctx.record.bucket,
                    ctx.record.offset,
                    ctx.event_time_ms,
                    ctx.watermark_ms,
                    ctx.processing_time_ms,
                )
            )

    tester = ProcessorTester(Looking, clock_ms=42)
    tester.feed("events", [{"user": "a", "ts": T0}], bucket=3)
    tester.advance_watermark(T0 - 5)
    tester.run_batch()

    assert seen == [("a", "events", 3, 0, T0, T0 - 5, 42)]
