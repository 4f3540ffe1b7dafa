"""Spark's Kafka reader as millrace sets it up: a micro-batch reads at most its cap."""

from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.engine import kafka

RECORDS = 2_500


@pytest.fixture
def backlog(workspace: Workspace, stream_name: str) -> str:
    """A stream of 2 buckets holding `RECORDS` records, none of them read yet."""
    create_stream(workspace.settings, stream_name, buckets=2)
    with Publisher(stream_name, settings=workspace.settings) as out:
        for number in range(RECORDS):
            out.send({"time": 1_767_225_600_000 + number, "n": number})
    return stream_name


def _batch_sizes(
    spark: SparkSession, settings: Settings, stream: str, checkpoint: Path, **cap: int
) -> list[int]:
    """The records each micro-batch read, draining `stream` from its start."""
    query = (
        kafka.read_stream(spark, settings, stream, **cap)
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_a_backlog_is_read_in_micro_batches_of_the_settings_cap(
    spark: SparkSession, workspace: Workspace, backlog: str, tmp_path: Path
) -> None:
    capped = replace(workspace.settings, spark_max_records_per_batch=1_000)

    sizes = _batch_sizes(spark, capped, backlog, tmp_path / "capped")

    assert sum(sizes) == RECORDS
    assert len(sizes) >= 3 and max(sizes) <= 1_000


def test_an_apps_own_cap_wins_and_0_reads_all_there_is_in_one(
    spark: SparkSession, workspace: Workspace, backlog: str, tmp_path: Path
) -> None:
    capped = replace(workspace.settings, spark_max_records_per_batch=1_000)
    unlimited = replace(workspace.settings, spark_max_records_per_batch=0)

    own = _batch_sizes(spark, capped, backlog, tmp_path / "own", max_records_per_batch=400)
    whole = _batch_sizes(spark, unlimited, backlog, tmp_path / "whole")

    assert sum(own) == RECORDS and max(own) <= 400
    assert whole == [RECORDS]
