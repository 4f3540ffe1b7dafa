"""Processors in batch over a stored range: the productions, ids included, of a streaming run
over the same records and of ProcessorTester; records outside the range are left out."""

import json

from pyspark.sql import SparkSession

from millrace.apps.processors.batch import run_processor_batch
from millrace.apps.processors.streaming import start_processor_app
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.records import Record
from millrace.testing import ProcessorTester
from tests.apps.processor_apps import (
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


def test_a_batch_run_gives_the_productions_of_the_streaming_run_and_the_tester(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    streamed_output, batch_output = f"{stream_name}.counts", f"{stream_name}.batch-counts"
    create_stream(workspace.settings, stream_name, buckets=1)
    for output in (streamed_output, batch_output):
        create_stream(workspace.settings, output, buckets=1)
    events = queries(0, 300)
    publish(workspace, stream_name, [*events, closing(events)])
    streaming = window_counter(stream_name, streamed_output)
    running = start_processor_app(
        spark, workspace, streaming, available_now=True, max_records_per_batch=100
    )
    running.await_termination()

    # The same processor under the same name (so the same ids), writing elsewhere.
    Batch = window_counter(stream_name, batch_output)  # noqa: N806 - a class
    Batch.name = streaming.name
    end_ms = closing(events)["ts"]
    ran = run_processor_batch(spark, workspace, Batch, start_ms=T0 - 60_000, end_ms=end_ms)

    streamed = {record.id: record.value for record in read(workspace, streamed_output)}
    batch = read(workspace, batch_output)
    assert {record.id: record.value for record in batch} == streamed
    assert produced_counts(batch) == window_counts(events)
    assert ran.productions == len(batch) and ran.dead_letters == ran.late == 0

    tester = ProcessorTester(Batch)
    tester.feed(
        stream_name,
        [
            Record(r.stream, r.bucket, r.offset, r.key, r.id, None, r.value)
            for r in read(workspace, stream_name)
            if r.value["ts"] < end_ms
        ],
    )
    tester.run_batch()
    tester.advance_watermark(end_ms)
    tester.fire_timers()
    assert {p.id: p.value for p in tester.productions[batch_output]} == streamed


def test_a_batch_run_takes_only_the_records_of_its_range(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.counts"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    events = queries(0, 200)
    publish(workspace, stream_name, events)
    start_ms, end_ms = T0 + 5_000, T0 + 20_000

    run_processor_batch(
        spark,
        workspace,
        window_counter(stream_name, output),
        start_ms=start_ms,
        end_ms=end_ms,
    )

    in_range = [event for event in events if start_ms <= event["ts"] < end_ms]
    assert produced_counts(read(workspace, output)) == window_counts(in_range)


def test_a_batch_run_sends_a_record_dated_before_1970_to_the_dead_letters(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    output = f"{stream_name}.echo"
    create_stream(workspace.settings, stream_name, buckets=1)
    create_stream(workspace.settings, output, buckets=1)
    producer = plain_producer(workspace.settings)
    for event in ({"query": "cats", "ts": T0}, {"query": "moon", "ts": -1}):
        producer.produce(stream_name, json.dumps(event).encode())
    producer.flush()

    ran = run_processor_batch(
        spark,
        workspace,
        failing_echo(stream_name, output, "stop"),
        start_ms=T0 - 60_000,
        end_ms=T0 + 1,
    )

    assert [record.value["query"] for record in read(workspace, output)] == ["cats"]
    [letter] = read(workspace, dead_letter_stream(stream_name))
    assert (letter.value["offset"], letter.value["error"]) == (1, OLD_REASON)
    assert ran.dead_letters == 1
