import time
from pathlib import Path

from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.streams import read_batch
from millrace.warehouse.archive import (
    RecordSource,
    archive_view,
    read_archive,
    read_records,
    start_archive,
)
from millrace.warehouse.layout import archived_streams
from tests.plain_producer import plain_producer

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000


def _publish(workspace: Workspace, stream: str, count: int, first: int = 0) -> list[str]:
    with Publisher(stream, settings=workspace.settings, time_field="time") as publisher:
        return [
            publisher.send({"time": START_MS + n * 60_000, "n": n, "page": f"p{n % 7}"})
            for n in range(first, first + count)
        ]


def _wait_for_a_batch(query, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not query.recentProgress:
        assert query.isActive and time.monotonic() < deadline, query.exception()
        time.sleep(0.2)


def test_the_archive_holds_every_record_once_across_a_restart_and_a_rerun_batch(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    published = _publish(workspace, stream_name, 2000)

    # Stopped after its first micro-batches, with most of the stream still to archive.
    first = start_archive(spark, workspace, stream_name, max_records_per_batch=300)
    _wait_for_a_batch(first)
    first.stop()
    archived_before = read_archive(spark, workspace, stream_name).count()
    assert 0 < archived_before < len(published)
    # As if the job had died after writing its last batch to Delta but before recording it
    # as done: the restarted job runs that batch again, and Delta must not append it twice.
    commits = sorted(
        (workspace.archive_checkpoint(stream_name) / "commits").glob("[0-9]*"),
        key=lambda path: int(path.name),
    )
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)

    published += _publish(workspace, stream_name, 500, first=2000)
    start_archive(spark, workspace, stream_name, available_now=True).awaitTermination()

    rows = archive_view(spark, workspace, stream_name).collect()
    ids = [row["record_id"] for row in rows]
    assert len(ids) == len(published)
    assert sorted(ids) == sorted(published)
    assert len({(row["bucket"], row["offset"]) for row in rows}) == len(rows)
    assert stream_name in archived_streams(workspace)
    # Partitioned by the event date: 2,500 minutes from the start span two days.
    days = {row["event_date"].isoformat() for row in rows}
    assert days == {"2026-01-01", "2026-01-02"}
    assert sorted(path.name for path in workspace.archive(stream_name).glob("event_date=*"))


def test_a_batch_read_of_the_archive_gives_the_records_and_dead_letters_of_the_bus(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    _publish(workspace, stream_name, 300)
    producer = plain_producer(workspace.settings)
    for value in (b"{not json", b"[1, 2]", b'{"time": "soon", "n": 1}', b'{"n": "many"}'):
        producer.produce(stream_name, value, partition=1)
    producer.flush()
    start_archive(spark, workspace, stream_name, available_now=True).awaitTermination()

    def read(source: RecordSource) -> tuple[list[tuple], int]:
        batch = read_batch(
            spark,
            workspace,
            stream_name,
            "n INT, page STRING",
            time="time",
            start_ms=START_MS + 60 * 60_000,
            end_ms=START_MS + 200 * 60_000,
            kafka_records=read_records(spark, workspace, stream_name, source),
        )
        return sorted(tuple(row) for row in batch.records.collect()), batch.dead_letter_count

    from_bus, from_warehouse = read("bus"), read("warehouse")
    assert from_warehouse == from_bus
    assert [row[0] for row in from_bus[0]] == sorted(range(60, 200))
    assert from_bus[1] == 4


def test_a_stream_without_an_archive_is_named_with_what_to_run(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    import pytest

    from millrace.errors import WarehouseError

    with pytest.raises(WarehouseError) as raised:
        read_archive(spark, workspace, "never.archived")
    assert "stream 'never.archived' has no archive" in raised.value.message
    assert (
        raised.value.hint == "archive it first: `millrace archive never.archived --available-now`"
    )
