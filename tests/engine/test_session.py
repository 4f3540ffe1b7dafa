import json
import math
import stat
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import StreamingQueryProgress

from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.engine import spark_internals
from millrace.engine.session import (
    add_listener,
    checkpoint_state_store,
    command_session,
    connector_jars,
    remove_listener,
    spark_config,
)
from millrace.errors import CheckpointCorruptError


def test_setup_gives_a_zip_like_pyspark_zip_bytecode_that_python_uses(tmp_path: Path) -> None:
    archive = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(archive, "w") as written:
        written.writestr("shipped/__init__.py", "")
        written.writestr("shipped/types.py", "def struct():\n    return 1\n")
    script = Path(__file__).parents[2] / "scripts" / "pyspark_bytecode.py"
    subprocess.run([sys.executable, str(script), str(archive)], check=True)
    once = archive.read_bytes()
    subprocess.run([sys.executable, str(script), str(archive)], check=True)
    assert archive.read_bytes() == once

    # As a Spark worker imports PySpark: from the zip, first on its path.
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import shipped.types as types; "
            "print(types.__file__); print(types.struct.__code__.co_filename)",
        ],
        env={"PYTHONPATH": str(archive)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == [f"{archive}/shipped/types.pyc", f"{archive}/shipped/types.py"]


def test_the_session_runs_in_utc_with_rocksdb_state_the_configured_partitions_and_codegen_cache(
    spark: SparkSession,
) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass").endswith(
        "RocksDBStateStoreProvider"
    )
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    # Enough compiled operators for a host's many apps (benchmarks/demo_cost.py).
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == "2000"


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


def test_local_checkpoint_files_are_written_whole_with_their_mode_by_millraces_own_manager(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Hadoop's own local file system starts a `chmod` and a `readlink` per checkpoint file:
    # millrace's manager (jvm/spark-extensions/.../LocalFiles.scala) sets the mode through Java.
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    checkpointing = jvm.org.apache.spark.sql.execution.streaming.checkpointing
    hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
    folder = tmp_path / "checkpoint"
    manager = checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path(str(folder)), hadoop_conf
    )
    assert manager.getClass().getName() == "dev.millrace.spark.LocalCheckpointFileManager"
    manager.mkdirs(jvm.org.apache.hadoop.fs.Path(str(folder)))

    for text in (b"first", b"second"):
        written = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(str(folder / "0")), True)
        written.write(bytearray(text))
        written.close()

    assert (folder / "0").read_bytes() == b"second"
    assert stat.S_IMODE((folder / "0").stat().st_mode) == 0o644
    assert sorted(path.name for path in folder.iterdir()) == [".0.crc", "0"]


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


def test_a_command_run_where_a_session_runs_leaves_it_and_its_queries_running(
    spark: SparkSession, workspace: Workspace
) -> None:
    """As in a notebook: `millrace run` or `check` called there must not stop its Spark."""
    theirs = spark.readStream.format("rate").load().writeStream.format("noop").start()
    try:
        with command_session(workspace.settings, "a-command") as session:
            assert session is spark
            ours = session.readStream.format("rate").load().writeStream.format("noop").start()
        assert not ours.isActive, "the command's own query stops with it"
        assert theirs.isActive
        assert SparkSession.getActiveSession() is spark and spark.range(3).count() == 3
    finally:
        theirs.stop()


class _Recorder(StreamingQueryListener):
    """Keeps each progress event it is given, for a test to wait for."""

    def __init__(self) -> None:
        self.progress: list[StreamingQueryProgress] = []
        self.changed = threading.Condition()

    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's callback names
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        with self.changed:
            self.progress.append(event.progress)
            self.changed.notify_all()

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass

    def wait_for(self, count: int) -> list[StreamingQueryProgress]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.progress) >= count, timeout=60)
            return list(self.progress)


def _what_a_user_reads(progress: StreamingQueryProgress) -> tuple:
    """A progress event's numbers, metrics and offsets, in a form that compares by value."""
    return (
        str(progress.runId),
        progress.name,
        progress.batchId,
        progress.numInputRows,
        progress.eventTime,
        [
            (operator.operatorName, operator.numRowsTotal, operator.customMetrics)
            for operator in progress.stateOperators
        ],
        {name: row.asDict() for name, row in progress.observedMetrics.items()},
        [json.loads(source.endOffset) for source in progress.sources],
        progress.sink.numOutputRows,
    )


def test_a_listener_gets_the_progress_pyspark_gives_and_stops_getting_it_once_removed(
    spark: SparkSession, tmp_path: Path
) -> None:
    # add_listener reads each event from its JSON; PySpark's own listener, field by field.
    ours, pysparks = _Recorder(), _Recorder()
    add_listener(spark, ours)
    spark.streams.addListener(pysparks)
    source = tmp_path / "source"
    source.mkdir()
    (source / "words.txt").write_text("a\nb\na\n")

    def run(name: str) -> None:
        counts = (
            spark.readStream.text(str(source))
            .observe(f"{name}.words", F.count(F.lit(1)).alias("words"))
            .groupBy("value")
            .count()
        )
        (
            counts.writeStream.outputMode("complete")
            .format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    try:
        run("listened")
        expected = pysparks.wait_for(1)
        got = ours.wait_for(len(expected))
        assert [_what_a_user_reads(p) for p in got] == [_what_a_user_reads(p) for p in expected]
        assert expected[0].observedMetrics["listened.words"].asDict() == {"words": 3}
        assert expected[0].stateOperators[0].numRowsTotal == 2  # two words in the state
    finally:
        remove_listener(spark, ours)
        spark.streams.removeListener(pysparks)

    run("unlistened")
    time.sleep(2)  # Spark's listener bus hands events over on a thread of its own
    assert all(progress.name == "listened" for progress in ours.progress)


class _EventOfJson:
    """A progress event as the JVM hands it over, reduced to the one call the bridge makes."""

    def __init__(self, progress: dict) -> None:
        self._json = json.dumps(progress)

    def progress(self) -> "_EventOfJson":
        return self

    def json(self) -> str:
        return self._json


def test_a_listener_gets_nan_for_the_rates_spark_leaves_out_of_an_events_json(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "words.txt").write_text("a\nb\n")
    query = (
        spark.readStream.text(str(source))
        .writeStream.format("memory")
        .queryName("rates")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = json.loads(query.lastProgress.json)
    # Spark's JSON has no rate that is NaN or infinite, as when a batch took no measurable
    # time; a test cannot make Spark do that, so the bridge is handed such JSON directly.
    for source_progress in progress["sources"]:
        del source_progress["inputRowsPerSecond"], source_progress["processedRowsPerSecond"]
    recorder = _Recorder()

    spark_internals.JsonProgressBridge(recorder).onQueryProgress(_EventOfJson(progress))

    (got,) = recorder.progress
    assert got.numInputRows == 2
    assert math.isnan(got.sources[0].inputRowsPerSecond)
    assert math.isnan(got.sources[0].processedRowsPerSecond)


def test_extra_driver_java_options_come_after_millraces_own_so_they_can_override_them() -> None:
    options = spark_config(Settings(spark_driver_java_options="-Xss4m -XX:TieredStopAtLevel=1"))[
        "spark.driver.extraJavaOptions"
    ].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=")
    # Threads get stack enough for Spark's regex over a stopped query's error (session.py).
    assert options[1] == "-Xss16m"
    # Then the class-data archive's options (tests/engine/test_class_archive.py), then theirs.
    assert options[-2:] == ["-Xss4m", "-XX:TieredStopAtLevel=1"]


# A session of its own, in a process of its own, whose JVM's stderr the test can read.
_STOP_DURING_A_JOB = """
import tempfile, time
from millrace.config.settings import Settings
from millrace.engine.session import spark_session

spark = spark_session(Settings(spark_master="local[1]"), app_name="stop-during-a-job")
started = []

def slow(batch, batch_id):
    started.append(batch_id)
    batch.selectExpr("java_method('java.lang.Thread', 'sleep', 20000L)").collect()

query = (
    spark.readStream.format("rate").load().writeStream.foreachBatch(slow)
    .option("checkpointLocation", tempfile.mkdtemp()).start()
)
while not started:
    time.sleep(0.1)
time.sleep(1)
query.stop()
print("stopped, exception:", query.exception())
"""


def test_stopping_a_query_during_its_micro_batch_prints_no_java_error() -> None:
    finished = subprocess.run(
        [sys.executable, "-c", _STOP_DURING_A_JOB],
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "stopped, exception: None" in finished.stdout
    assert "StackOverflowError" not in finished.stderr
    assert "Exception in thread" not in finished.stderr


@pytest.mark.parametrize("entry", ["v1\n", 'v1\n{"batchWatermarkMs"\n', "v1\n[]\n"])
def test_an_offset_log_entry_without_readable_metadata_is_a_corrupt_checkpoint(
    tmp_path: Path, entry: str
) -> None:
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    (offsets / "0").write_text('v1\n{"conf": {}}\n{}\n')
    (offsets / "1").write_text(entry)
    with pytest.raises(CheckpointCorruptError, match=r"offsets/1 cannot be read") as raised:
        checkpoint_state_store(tmp_path)
    assert "rollback" in raised.value.hint
