from pathlib import Path

from pyspark.sql import SparkSession

from millrace.config.settings import Settings
from millrace.engine.session import connector_jars, spark_config


def test_the_session_runs_in_utc_with_rocksdb_state_and_the_configured_partitions(
    spark: SparkSession,
) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass").endswith(
        "RocksDBStateStoreProvider"
    )
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_state_is_committed_as_changelogs_and_restored_from_them_on_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    source.mkdir()

    def run_once(words: list[str], name: str) -> dict[str, int]:
        (source / f"{name}.txt").write_text("\n".join(words))
        counts = spark.readStream.text(str(source)).groupBy("value").count()
        query = (
            counts.writeStream.outputMode("complete")
            .format("memory")
            .queryName(name)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return {row["value"]: row["count"] for row in spark.table(name).collect()}

    assert run_once(["a", "b", "a"], "first_run") == {"a": 2, "b": 1}
    assert run_once(["a", "c"], "second_run") == {"a": 3, "b": 1, "c": 1}
    assert list(checkpoint.glob("state/0/*/2.changelog"))


def test_the_kafka_connector_and_delta_are_on_the_classpath_without_pyspark_duplicates(
    settings: Settings,
    spark: SparkSession,
) -> None:
    names = [jar.name for jar in connector_jars(settings)]
    assert any(name.startswith("spark-sql-kafka-0-10_2.13-4.2.0") for name in names)
    assert any(name.startswith("delta-spark_4.2_2.13") for name in names)
    assert not any(
        name.startswith(("jackson-databind", "scala-library", "hadoop-client-api"))
        for name in names
    )
    assert spark.conf.get("spark.jars").split(",") == [str(jar) for jar in connector_jars(settings)]


def test_delta_tables_can_be_written_and_read(spark: SparkSession, tmp_path) -> None:
    path = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(path)
    assert sorted(row.id for row in spark.read.format("delta").load(path).collect()) == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_extra_driver_java_options_are_added_to_the_quiet_log_configuration() -> None:
    options = spark_config(Settings(spark_driver_java_options="-XX:TieredStopAtLevel=1"))[
        "spark.driver.extraJavaOptions"
    ].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=")
    assert options[1:] == ["-XX:TieredStopAtLevel=1"]
