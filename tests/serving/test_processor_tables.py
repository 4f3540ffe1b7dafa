# ruff: noqa: RUF012

import uuid

import pytest
from pyspark.sql import SparkSession

from millrace import Input, Processor
from millrace.apps.processors.batch import run_processor_batch
from millrace.apps.processors.placement import Placement
from millrace.apps.processors.streaming import start_processor_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import ProcessorError
from millrace.serving.tables import TableSpec, create_table, drop_table, get_rows, write_rows
from millrace.testing import ProcessorTester


def enricher(source: str, output: str, lookup: str, served: str) -> type[Processor]:
    class Enricher(Processor):
        name = f"enricher_{uuid.uuid4().hex[:8]}"
        inputs = [Input(source, key="user")]
        lookups = {lookup: "dimension_id"}

        def on_record(self, key, record, ctx):
            row = ctx.lookup(lookup, record["dimension_id"])
            topic = None if row is None else row["topic"]
            ctx.produce(output, {"user": key, "n": record["n"], "topic": topic})
            ctx.produce_to_table(served, {"user": key, "topic": topic, "n": record["n"]})

    return Enricher


def test_ctx_lookup_and_produce_to_table_on_spark_match_the_tester(
    spark: SparkSession, workspace: Workspace, redis_url: str
) -> None:
    settings = workspace.settings
    suffix = uuid.uuid4().hex[:8]
    source, output = f"test.users.{suffix}", f"test.users_enriched.{suffix}"
    create_stream(settings, source, buckets=2)
    create_stream(settings, output)
    lookup = create_table(
        settings, TableSpec(f"cls_{suffix}", (("dimension_id", "STRING"),), (("topic", "STRING"),))
    )
    classified = {f"d{n}": f"topic{n % 3}" for n in range(8)}  # d8, d9 are missing
    write_rows(
        redis_url, lookup, {"dimension_id": list(classified), "topic": list(classified.values())}
    )
    served = create_table(
        settings,
        TableSpec(f"last_{suffix}", (("user", "STRING"),), (("topic", "STRING"), ("n", "BIGINT"))),
    )
    events = [
        {"user": f"u{n % 13}", "dimension_id": f"d{n % 10}", "n": n, "time": 1_767_225_600_000 + n}
        for n in range(400)
    ]
    with Publisher(source, settings=settings) as publisher:
        for event in events:
            publisher.send(event, key=event["user"])
    processor = enricher(source, output, lookup.name, served.name)
    running = start_processor_app(
        spark, workspace, processor, available_now=True, placement=Placement(4)
    )
    running.await_termination()

    tester = ProcessorTester(
        processor,
        tables={lookup.name: {key: {"topic": topic} for key, topic in classified.items()}},
    )
    tester.feed(source, events)
    tester.run_batch()
    produced = [r.value for r in tail(output, TailStart(from_beginning=True), settings=settings)]
    assert sorted(produced, key=lambda v: v["n"]) == sorted(
        tester.values(output), key=lambda v: v["n"]
    )
    assert sum(1 for value in produced if value["topic"] is None) == 80  # d8, d9: None
    last = {}
    for event in events:  # plain Python: each user's last event wins
        last[event["user"]] = {
            "user": event["user"],
            "topic": classified.get(event["dimension_id"]),
            "n": event["n"],
        }
    users = sorted(last)
    assert get_rows(settings, served.name, users) == [last[user] for user in users]
    drop_table(settings, lookup.name)
    drop_table(settings, served.name)


def test_a_processor_that_declares_an_unknown_lookup_table_does_not_start(
    spark: SparkSession, workspace: Workspace, redis_url: str, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name)
    processor = enricher(stream_name, stream_name, "no_such_table", "nor_this")
    with pytest.raises(ProcessorError, match="serving table 'no_such_table' does not exist"):
        start_processor_app(spark, workspace, processor)


def test_a_batch_run_looks_up_serving_tables_as_a_streaming_run_does(
    spark: SparkSession, workspace: Workspace, redis_url: str
) -> None:
    settings = workspace.settings
    suffix = uuid.uuid4().hex[:8]
    source, output = f"test.users.{suffix}", f"test.users_enriched.{suffix}"
    create_stream(settings, source, buckets=2)
    create_stream(settings, output)
    lookup = create_table(
        settings, TableSpec(f"cls_{suffix}", (("dimension_id", "STRING"),), (("topic", "STRING"),))
    )
    classified = {f"d{n}": f"topic{n % 3}" for n in range(4)}  # d4 is missing
    write_rows(
        redis_url, lookup, {"dimension_id": list(classified), "topic": list(classified.values())}
    )
    served = create_table(
        settings,
        TableSpec(f"last_{suffix}", (("user", "STRING"),), (("topic", "STRING"), ("n", "BIGINT"))),
    )
    start_ms = 1_767_225_600_000
    events = [
        {"user": f"u{n % 7}", "dimension_id": f"d{n % 5}", "n": n, "time": start_ms + n}
        for n in range(100)
    ]
    with Publisher(source, settings=settings) as publisher:
        for event in events:
            publisher.send(event, key=event["user"])
    processor = enricher(source, output, lookup.name, served.name)

    run = run_processor_batch(
        spark, workspace, processor, start_ms=start_ms, end_ms=start_ms + 1000, buckets=4
    )

    tester = ProcessorTester(
        processor,
        tables={lookup.name: {key: {"topic": topic} for key, topic in classified.items()}},
    )
    tester.feed(source, events)
    tester.run_batch()
    produced = [r.value for r in tail(output, TailStart(from_beginning=True), settings=settings)]
    assert run.productions == len(produced) + len(events)  # and one table row per event
    assert sorted(produced, key=lambda v: v["n"]) == sorted(
        tester.values(output), key=lambda v: v["n"]
    )
    assert sum(1 for value in produced if value["topic"] is None) == 20  # d4: None
    drop_table(settings, lookup.name)
    drop_table(settings, served.name)
