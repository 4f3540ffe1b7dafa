"""A processor's buckets share Spark's tasks evenly: Spark's own partitioner sends each spread
bucket's group to the task `bucket mod tasks`, for any power of two of tasks up to 64."""

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.apps.processors.placement import SPREAD_TASKS, Placement


@pytest.mark.parametrize("buckets", [8, 64, 1024])
def test_spark_sends_each_spread_bucket_to_the_task_of_its_remainder(
    spark: SparkSession, buckets: int
) -> None:
    placement = Placement(buckets)
    groups = spark.createDataFrame(
        [(bucket, placement.group_of(bucket)) for bucket in range(buckets)], "bucket INT, g INT"
    )
    for tasks in (1, 2, 4, 8, 16, SPREAD_TASKS):
        # repartition by a column is the hash partitioning a stateful operator's groups take.
        placed = groups.repartition(tasks, "g").select(
            "bucket", F.spark_partition_id().alias("task")
        )
        assert {row["bucket"]: row["task"] for row in placed.collect()} == {
            bucket: bucket % tasks for bucket in range(buckets)
        }


def test_a_spread_group_leads_back_to_its_bucket_and_each_bucket_has_its_own() -> None:
    placement = Placement(1024)
    groups = [placement.group_of(bucket) for bucket in range(1024)]
    assert len(set(groups)) == 1024
    assert [placement.bucket_of(group) for group in groups] == list(range(1024))


def test_buckets_grouped_by_their_numbers_stay_so() -> None:
    # The placement of a checkpoint started before the spread: its state is under the numbers.
    placement = Placement(64, spread=False)
    assert [placement.group_of(bucket) for bucket in range(64)] == list(range(64))
    assert placement.bucket_of(63) == 63


def test_the_group_column_gives_each_rows_bucket_its_group(spark: SparkSession) -> None:
    placement = Placement(8)
    rows = spark.range(8).select(F.col("id").cast("int").alias("bucket"))
    grouped = rows.select("bucket", placement.group_column(F.col("bucket")).alias("g")).collect()
    assert {row["bucket"]: row["g"] for row in grouped} == {
        bucket: placement.group_of(bucket) for bucket in range(8)
    }
