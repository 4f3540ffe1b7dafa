# ruff: noqa: RUF012

import pytest

from millrace import Input, Processor
from millrace.errors import ProcessorError
from millrace.processor.execution import run_batch
from millrace.processor.lookups import MemoryTables
from millrace.records import Record
from millrace.testing import ProcessorTester


class Enricher(Processor):
    name = "enricher"
    inputs = [Input("events", key="user")]
    lookups = {"classifications": "dimension_id"}

    def on_record(self, key, record, ctx):
        row = ctx.lookup("classifications", record["dimension_id"])
        topic = None if row is None else row["topic"]
        ctx.produce("enriched", {"user": key, "topic": topic})
        ctx.produce_to_table("last_topic", {"user": key, "topic": topic})


def test_ctx_lookup_reads_the_testers_tables_and_a_missing_key_gives_none() -> None:
    tester = ProcessorTester(
        Enricher, tables={"classifications": {"d1": {"topic": "cats"}, "d2": {"topic": "dogs"}}}
    )
    events = [("u1", "d1"), ("u2", "d2"), ("u1", "d9"), ("u3", "d2")]
    tester.feed("events", [{"user": u, "dimension_id": d, "time": 1000} for u, d in events])
    tester.run_batch()
    table = {"d1": "cats", "d2": "dogs"}
    expected = [{"user": u, "topic": table.get(d)} for u, d in events]
    assert sorted(tester.values("enriched"), key=str) == sorted(expected, key=str)
    assert sorted(tester.table_rows("last_topic"), key=str) == sorted(expected, key=str)


def test_ctx_lookup_of_a_table_the_tester_lacks_is_a_processor_error() -> None:
    tester = ProcessorTester(Enricher)
    tester.feed("events", [{"user": "u1", "dimension_id": "d1", "time": 1000}])
    with pytest.raises(ProcessorError, match="serving table 'classifications' does not exist"):
        tester.run_batch()


def test_run_batch_reads_the_lookup_source_it_is_given_and_no_other() -> None:
    record = Record("events", 0, 0, None, "r0", 1000, {"user": "u1", "dimension_id": "d1"})
    cats = MemoryTables({"classifications": {"d1": {"topic": "cats"}}})
    dogs = MemoryTables({"classifications": {"d1": {"topic": "dogs"}}})

    def topics(source: MemoryTables | None) -> list[str | None]:
        outcome = run_batch(
            Enricher(), {}, [record], watermark_ms=None, processing_time_ms=0, lookups=source
        )
        return [p.value["topic"] for p in outcome.productions if p.stream == "enriched"]

    assert topics(cats) == ["cats"]
    assert topics(dogs) == ["dogs"]
    with pytest.raises(ProcessorError, match="has no serving tables to read here"):
        topics(None)
