"""Processor apps on Spark: the same productions, ids and state as ProcessorTester, exactly
once across restarts, monoids, failures that stop the app or go to dead letters, and records
that cannot be read."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

import heapq
import itertools
import json
import uuid
from collections import Counter

import pytest
from pyspark.sql import SparkSession

from millrace import Count, Input, Max, Min, Processor, TopK
from millrace.apps.processors.rows import LETTER_FIELDS
from millrace.apps.processors.streaming import RunningProcessor, start_processor_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.errors import ProcessorError
from millrace.records import Record
from millrace.sql.parser import parse_app
from millrace.testing import ProcessorTester
from millrace.warehouse.result_tables import read_result_rows
from tests.apps.processor_apps import (
    LATENESS_MS,
    OLD_REASON,
    T0,
    closing,
    failing_echo,
    produced_counts,
    publish,
    queries,
    read,
    window_counter,
    window_counts,
)
from tests.plain_producer import plain_producer

BATCH_RECORDS = 100


def counting_app(workspace: Workspace, stream: str) -> tuple[str, type[Processor]]:
    """The WindowCounter over `stream` (one bucket, created), into a new counts stream."""
    output = f"{stream}.counts"
    create_stream(workspace.settings, stream, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    return output, window_counter(stream, output)


def run_to_the_end(
    spark: SparkSession, workspace: Workspace, processor: type[Processor]
) -> RunningProcessor:
    """`processor` on Spark over all its input, `BATCH_RECORDS` records per micro-batch."""
    running = start_processor_app(
        spark, workspace, processor, available_now=True, max_records_per_batch=BATCH_RECORDS
    )
    running.await_termination()
    return running


def assert_tester_produces(
    produced: list[Record], workspace: Workspace, processor: type[Processor], stream: str
) -> ProcessorTester:
    """ProcessorTester over what `stream` holds, in the Spark run's micro-batches: it must give
    the `produced` records, ids included."""
    tester = ProcessorTester(processor)
    inputs = [
        Record(r.stream, r.bucket, r.offset, r.key, r.id, None, r.value)
        for r in read(workspace, stream)
    ]
    for start in range(0, len(inputs), BATCH_RECORDS):
        tester.feed(stream, inputs[start : start + BATCH_RECORDS])
        tester.run_batch()
    tester.fire_timers()
    [output] = {record.stream for record in produced}
    assert {p.id: p.value for p in tester.productions[output]} == {
        record.id: record.value for record in produced
    }
    return tester


def test_window_counter_on_spark_matches_plain_python_and_the_tester(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output, processor = counting_app(workspace, stream_name)
    events = queries(0, 300)
    publish(workspace, stream_name, [*events, closing(events)])

    running = run_to_the_end(spark, workspace, processor)

    produced = read(workspace, output)
    assert produced_counts(produced) == window_counts(events)
    assert len({record.id for record in produced}) == len(produced)
    assert running.late == 0
    assert_tester_produces(produced, workspace, processor, stream_name)


def test_copies_of_processed_records_are_dropped_on_spark_as_in_the_tester(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output, processor = counting_app(workspace, stream_name)
    events = queries(0, 300)
    # An upstream batch that is re-run after a crash writes its records again with the same
    # ids: here a copy of every tenth event comes five events after it.
    sent = []
    for n, event in enumerate(events):
        sent.append((event, f"query-{n}"))
        if n % 10 == 5:
            sent.append((events[n - 5], f"query-{n - 5}"))
    with Publisher(stream_name, settings=workspace.settings, time_field="ts") as publisher:
        for event, record_id in [*sent, (closing(events), "closing")]:
            publisher.send(event, key=event["query"], record_id=record_id)

    running = run_to_the_end(spark, workspace, processor)

    produced = read(workspace, output)
    assert produced_counts(produced) == window_counts(events)
    assert (running.duplicates, running.late) == (len(sent) - len(events), 0)
    tester = assert_tester_produces(produced, workspace, processor, stream_name)
    assert len(tester.duplicates) == running.duplicates


def test_a_restarted_processor_resumes_its_state_and_loses_or_repeats_no_production(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.counts"
    create_stream(workspace.settings, stream_name, buckets=2)
    create_stream(workspace.settings, output, buckets=1)
    processor = window_counter(stream_name, output)
    before, after = queries(0, 150), queries(150, 150)
    publish(workspace, stream_name, before)
    first = start_processor_app(spark, workspace, processor, max_records_per_batch=60)
    first.process_all_available()
    first.stop()
    produced_before = read(workspace, output)
    # Windows closed by the first run's watermark were produced; the others wait in state.
    assert 0 < sum(produced_counts(produced_before).values()) < len(before)

    publish(workspace, stream_name, after)
    # In both buckets: the watermark is the least over them.
    with Publisher(stream_name, settings=workspace.settings, time_field="ts") as publisher:
        for bucket in range(2):
            publisher.send(closing(after), record_id="closing", bucket=bucket)
    second = start_processor_app(spark, workspace, processor, available_now=True)
    second.await_termination()

    produced = read(workspace, output)
    assert len({record.id for record in produced}) == len(produced)
    assert produced_counts(produced) == window_counts(before + after)
    assert first.late == second.late == 0


def test_a_monoid_processor_gives_the_aggregates_of_the_tester(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.totals"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)

    class QueryTotals(Processor):
        name = f"query_totals_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream_name, key="query", time="ts")]
        zero = {"count": 0, "last": 0}

        def lift(self, record):
            return {"count": 1, "last": record["ts"]}

        def combine(self, a, b):
            return {"count": a["count"] + b["count"], "last": max(a["last"], b["last"])}

        def on_aggregate(self, key, aggregate, ctx):
            ctx.produce(output, {"query": key, **aggregate}, key=key)

    events = queries(0, 200)
    publish(workspace, stream_name, events)
    running = start_processor_app(
        spark, workspace, QueryTotals, available_now=True, max_records_per_batch=50
    )
    running.await_termination()

    produced = read(workspace, output)
    tester = ProcessorTester(QueryTotals)
    inputs = [
        Record(r.stream, r.bucket, r.offset, r.key, r.id, None, r.value)
        for r in read(workspace, stream_name)
    ]
    for start in range(0, len(inputs), 50):
        tester.feed(stream_name, inputs[start : start + 50])
        tester.run_batch()
    assert sorted((p.id, str(p.value)) for p in tester.productions[output]) == sorted(
        (record.id, str(record.value)) for record in produced
    )
    # No lateness: records behind the previous micro-batches' latest time are late.
    late = Counter(record.value["query"] for record in tester.late)
    assert running.late == sum(late.values()) > 0
    final = Counter({record.value["query"]: record.value["count"] for record in produced})
    assert final + late == Counter(event["query"] for event in events)


def test_a_declared_monoid_on_spark_gives_the_aggregates_of_plain_python_and_the_tester(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.times"
    create_stream(workspace.settings, stream_name, buckets=2)
    create_stream(workspace.settings, output, buckets=1)

    class QueryTimes(Processor):
        name = f"query_times_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream_name, key="query", time="ts", lateness=f"{LATENESS_MS}ms")]
        monoid = (Count(), Min("ts"), Max("ts"), TopK(3, "ts"))

        def on_aggregate(self, key, aggregate, ctx):
            ctx.produce(output, {"query": key, "aggregate": aggregate}, key=key)

    events = queries(0, 200)
    publish(workspace, stream_name, events)
    running = start_processor_app(
        spark, workspace, QueryTimes, available_now=True, max_records_per_batch=40
    )
    running.await_termination()

    produced = read(workspace, output)
    final = {record.value["query"]: record.value["aggregate"] for record in produced}
    for query in {event["query"] for event in events}:
        times = [event["ts"] for event in events if event["query"] == query]
        assert final[query] == [len(times), min(times), max(times), heapq.nlargest(3, times)]
    tester = ProcessorTester(QueryTimes)
    for bucket in (0, 1):
        tester.feed(
            stream_name,
            [
                Record(r.stream, r.bucket, r.offset, r.key, r.id, None, r.value)
                for r in read(workspace, stream_name)
                if r.bucket == bucket
            ],
            bucket=bucket,
        )
    tester.run_batch()
    assert {p.value["query"]: p.value["aggregate"] for p in tester.productions[output]} == final


def test_productions_without_a_key_are_spread_over_the_buckets_in_step(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=3)

    class Echo(Processor):
        name = f"echo_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream_name, key="query", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.produce(output, record)

    events = [{**event, "n": n} for n, event in enumerate(queries(0, 1500))]
    publish(workspace, stream_name, events)
    start_processor_app(spark, workspace, Echo, available_now=True).await_termination()

    # Left to Kafka's producer, one micro-batch's productions would go to one bucket in runs
    # of a producer's batch (a hundred records and more), and a reader's watermark, which
    # follows the bucket furthest ahead, would find the others' records late. A hash of each
    # production's id throws them over the buckets like a die: the ids are new in every run,
    # so the bounds are those a fair die keeps but for once in 10**5 runs or fewer (simulated
    # over 100,000 runs of 1,500 throws, a share strayed more than 60 from a third in 0.6 %,
    # more than 80 in 0.01 %; a run of 25 comes once in 10**8).
    bucket_of = {record.value["n"]: record.bucket for record in read(workspace, output)}
    assert sorted(bucket_of) == list(range(len(events)))
    in_time_order = [
        bucket_of[event["n"]] for event in sorted(events, key=lambda e: (e["ts"], e["n"]))
    ]
    assert max(len(list(run)) for _, run in itertools.groupby(in_time_order)) < 25
    so_far = [0, 0, 0]
    for count, bucket in enumerate(in_time_order, start=1):
        so_far[bucket] += 1
        assert all(abs(share - count / 3) <= 100 for share in so_far)


def _echo(stream: str, output: str, *, boom_to: str) -> type[Processor]:
    """A processor producing each record of `stream` to `output`, and a "boom" to `boom_to` too."""

    class Echo(Processor):
        name = f"echo_{uuid.uuid4().hex[:8]}"
        inputs = [Input(stream, key="query", time="ts")]

        def on_record(self, key, record, ctx):
            ctx.produce(output, record)
            if record["query"] == "boom":
                ctx.produce(boom_to, record)

    return Echo


def test_a_production_to_a_stream_that_does_not_exist_stops_the_app_and_writes_nothing(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output, missing = f"{stream_name}.echo", f"{stream_name}.missing"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)

    echo = _echo(stream_name, output, boom_to=missing)
    events = queries(0, 20)
    events[7] = {"query": "boom", "ts": T0}
    publish(workspace, stream_name, events)

    running = start_processor_app(spark, workspace, echo, available_now=True)
    with pytest.raises(ProcessorError) as raised:
        running.await_termination()
    assert f"stream {missing!r}, output of processor {echo.name!r}, does not exist" in (
        raised.value.message
    )
    assert f"`millrace stream create {missing}`" in raised.value.hint
    assert read(workspace, output) == []

    # Created as the hint says, the app run again writes each production once.
    create_stream(workspace.settings, missing, buckets=1)
    start_processor_app(spark, workspace, echo, available_now=True).await_termination()
    assert len(read(workspace, output)) == len(events)
    assert [record.value for record in read(workspace, missing)] == [events[7]]


def test_a_spark_session_writing_kafka_through_datasource_v1_is_refused_before_the_start(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    echo = _echo(stream_name, f"{stream_name}.echo", boom_to=f"{stream_name}.boom")
    key = "spark.sql.sources.useV1SourceList"
    millrace_sources = spark.conf.get(key)
    running_before = len(spark.streams.active)
    spark.conf.set(key, "parquet,kafka")
    try:
        with pytest.raises(ProcessorError) as raised:
            start_processor_app(spark, workspace, echo, available_now=True)
    finally:
        spark.conf.set(key, millrace_sources)
    assert f"{key} lists kafka" in raised.value.message
    assert "millrace.engine.session.spark_session" in raised.value.hint
    assert len(spark.streams.active) == running_before


def test_a_stream_first_produced_to_in_a_later_micro_batch_gets_its_productions_once(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output, later = f"{stream_name}.echo", f"{stream_name}.later"
    for stream in (stream_name, output, later):
        create_stream(workspace.settings, stream, buckets=1)

    echo = _echo(stream_name, output, boom_to=later)
    # In time order, so that none comes behind the watermark of the micro-batches before it.
    events = [{**event, "ts": T0 + n * 150} for n, event in enumerate(queries(0, 20))]
    events[13]["query"] = "boom"
    publish(workspace, stream_name, events)

    # Five records a micro-batch: the third produces to `later` first, after two to `output`.
    start_processor_app(
        spark, workspace, echo, available_now=True, max_records_per_batch=5
    ).await_termination()
    echoed = Counter(json.dumps(record.value) for record in read(workspace, output))
    assert echoed == Counter(json.dumps(event) for event in events)
    assert [record.value for record in read(workspace, later)] == [events[13]]


@pytest.mark.parametrize("on_error", ["stop", "dlq"])
def test_a_failing_callback_stops_the_app_or_goes_to_the_dead_letters(
    spark: SparkSession, workspace: Workspace, stream_name: str, on_error: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    processor = failing_echo(stream_name, output, on_error)
    events = queries(0, 20)
    events[7] = {"query": "boom", "ts": T0}
    publish(workspace, stream_name, events)

    running = start_processor_app(spark, workspace, processor, available_now=True)
    if on_error == "stop":
        with pytest.raises(ProcessorError) as raised:
            running.await_termination()
        message = raised.value.message
        for part in (processor.name, "key 'boom'", stream_name, "bucket 0", "offset 7"):
            assert part in message
        assert read(workspace, output) == []
        return
    running.await_termination()
    assert len(read(workspace, output)) == 19
    letters = read(workspace, dead_letter_stream(stream_name))
    assert [(letter.value["offset"], letter.value["key"]) for letter in letters] == [(7, "boom")]
    assert "ValueError: boom is not a query" in letters[0].value["error"]
    assert running.dead_letters == 1


def test_values_not_utf8_json_objects_or_without_a_time_go_to_the_dead_letters(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    processor = failing_echo(stream_name, output, "dlq")
    producer = plain_producer(workspace.settings)
    raw = [
        json.dumps({"query": "cats", "ts": T0}).encode(),
        b"not json",
        b"[1, 2]",
        json.dumps({"query": "dogs"}).encode(),
        json.dumps({"query": "fish", "ts": T0 + 1}).encode(),
        b'{"query": "caf\xe9", "ts": %d}' % T0,
    ]
    for value in raw:
        producer.produce(stream_name, value)
    producer.flush()

    running = start_processor_app(spark, workspace, processor, available_now=True)
    running.await_termination()

    assert [record.value["query"] for record in read(workspace, output)] == ["cats", "fish"]
    letters = {
        letter.value["offset"]: letter.value
        for letter in read(workspace, dead_letter_stream(stream_name))
    }
    assert sorted(letters) == [1, 2, 3, 5]
    assert letters[1]["error"].startswith("value is not valid JSON")
    assert letters[1]["original"] == "not json"
    assert letters[2]["error"] == "value is JSON but not an object: list"
    assert letters[3]["processor"] == processor.name
    assert "ts" in letters[3]["error"]
    assert letters[5]["error"] == "value is not valid UTF-8"
    assert running.dead_letters == 4
    # Whatever its cause, a processor's dead letter has the same fields.
    assert all(list(letter) == list(LETTER_FIELDS) for letter in letters.values())
    assert {letter["processor"] for letter in letters.values()} == {processor.name}


def test_a_record_dated_before_1970_goes_to_the_dead_letters_rather_than_being_late(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    producer = plain_producer(workspace.settings)
    for event in ({"query": "cats", "ts": T0}, {"query": "moon", "ts": -1}):
        producer.produce(stream_name, json.dumps(event).encode())
    producer.flush()

    running = start_processor_app(
        spark, workspace, failing_echo(stream_name, output, "stop"), available_now=True
    )
    running.await_termination()

    assert [record.value["query"] for record in read(workspace, output)] == ["cats"]
    [letter] = read(workspace, dead_letter_stream(stream_name))
    assert (letter.value["offset"], letter.value["error"]) == (1, OLD_REASON)
    assert (running.dead_letters, running.late) == (1, 0)


def test_records_with_an_empty_id_header_are_known_by_their_place_not_dropped_as_copies(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    producer = plain_producer(workspace.settings)
    for query in ("cats", "cats", "dogs"):
        event = json.dumps({"query": query, "ts": T0}).encode()
        producer.produce(stream_name, event, headers=[("id", b"")])
    producer.flush()

    running = start_processor_app(
        spark, workspace, failing_echo(stream_name, output, "stop"), available_now=True
    )
    running.await_termination()

    echoed = sorted(record.value["query"] for record in read(workspace, output))
    assert echoed == ["cats", "cats", "dogs"]
    assert running.duplicates == 0


def test_productions_carry_their_time_ms_to_tail_and_to_a_sql_app_windowing_them(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output, processor = counting_app(workspace, stream_name)
    events = queries(0, 300)
    publish(workspace, stream_name, [*events, closing(events)])
    run_to_the_end(spark, workspace, processor)

    produced = read(workspace, output)
    # The counts hold no time field: each record still has its production's time_ms.
    assert "time" not in produced[0].value
    assert [record.time_ms for record in produced] == [r.value["bucket"] for r in produced]

    app = parse_app(
        f"CREATE APPLICATION sums_{uuid.uuid4().hex[:8]};\n"
        "CREATE INPUT TABLE counts (query, count BIGINT)\n"
        f"  FROM STREAM('{output}') TIME time LATENESS '0 seconds';\n"
        "CREATE TABLE per_5s AS\n"
        "SELECT query, SUM(count) AS n FROM counts [5 seconds] GROUP BY query;\n"
    )
    start_sql_app(spark, workspace, app, available_now=True).await_termination()

    summed = {
        (row["query"], int(row["window_start"].timestamp() * 1000)): row["n"]
        for row in read_result_rows(workspace, app.name, "per_5s")
    }
    # The processor's watermark markers promise its output up to its input's closing record,
    # so the SQL app closes every window, the last one too, with no lateness and no record of
    # its own far ahead.
    expected = Counter((event["query"], event["ts"] // 5000 * 5000) for event in events)
    assert summed == dict(expected)


def test_a_record_without_its_time_field_is_dated_by_the_time_it_carries_in_its_header(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    producer = plain_producer(workspace.settings)
    sent = [
        ({"query": "cats"}, T0 + 5),  # as another app's production arrives
        ({"query": "dogs", "ts": T0 + 9}, T0 + 1),  # the field wins over the header
        ({"query": "fish"}, None),  # no time at all: a dead letter
    ]
    for value, carried in sent:
        headers = [] if carried is None else [("time", str(carried).encode())]
        producer.produce(stream_name, json.dumps(value).encode(), headers=headers)
    producer.flush()

    running = start_processor_app(
        spark, workspace, failing_echo(stream_name, output, "dlq"), available_now=True
    )
    running.await_termination()

    echoed = {record.value["query"]: record.time_ms for record in read(workspace, output)}
    assert echoed == {"cats": T0 + 5, "dogs": T0 + 9}
    assert running.dead_letters == 1
