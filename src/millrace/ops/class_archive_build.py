"""Building the class-data archive of Spark's driver JVM (`millrace.engine.class_archive`).

`python -m millrace.ops.class_archive_build` (run by scripts/setup.sh) starts a driver
that exercises what apps use (SQL, a stateful streaming aggregation,
`transformWithStateInPandas`, Delta reads, writes and merges, and a processor app and a SQL
app reading and writing Kafka on a broker of their own) and has the JVM write the classes it
loaded when it exits. It builds only when no complete archive of this install's name exists.
It is a setup step of operations, apart from the engine: it starts a SparkSession
(`millrace.engine.session`), which itself names the archive to every driver it starts, writes
Delta tables as apps do (`millrace.warehouse.delta`), and runs apps as `millrace run` does
(`millrace.apps`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from millrace.apps.processors.streaming import start_processor_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.broker import start_broker, stop_broker
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.local_processes import free_loopback_ports
from millrace.config.settings import Settings
from millrace.config.settings_loader import load_settings
from millrace.config.workspace import Workspace
from millrace.engine import spark_internals
from millrace.engine.class_archive import QUIET_SHARING, archive_file, is_complete
from millrace.engine.session import connector_jars, spark_session, stop_spark_session
from millrace.errors import MillraceError, SetupError
from millrace.processor import Context, Input, Processor, Timer, ValueState
from millrace.sql.parser import parse_app
from millrace.warehouse.delta import spark_append, spark_merge, spark_read, spark_stream_writer


def _build(settings: Settings, archive: Path) -> None:
    """Write `archive` from a driver started in this process; `SetupError` when it could not.

    It takes about a minute: the driver runs what apps run (`_exercise`), and its JVM
    writes the archive as it exits, beside the archive's name, which it takes once complete.
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    written = archive.with_suffix(f".{os.getpid()}.partial")
    dump = f"-XX:ArchiveClassesAtExit={written} {QUIET_SHARING}"
    options = f"{settings.spark_driver_java_options} {dump}".strip()
    with tempfile.TemporaryDirectory(prefix="millrace-class-data-") as scratch:
        _exercise(replace(settings, spark_driver_java_options=options), Path(scratch))
        # The JVM writes the archive as it exits.
        spark_internals.stop_jvm()
    if not is_complete(written):
        written.unlink(missing_ok=True)
        raise SetupError(
            f"the Spark driver did not write its class-data archive {written}",
            hint="Spark still runs without it, only its drivers start slower; run "
            "`bash scripts/setup.sh` again once the error above is fixed",
        )
    # Archives of an earlier install, and files of a build that was killed.
    for stale in archive.parent.glob("spark-driver-*"):
        if stale != written:
            stale.unlink()
    os.replace(written, archive)


def _exercise(settings: Settings, scratch: Path) -> None:
    """Start a driver and run in it what apps run, so that the archive holds their classes.

    SQL apps: a windowed count with a watermark over a streaming source, merged into a Delta
    table through `foreachBatch`, read back. Processors: `transformWithStateInPandas` with a
    value state on RocksDB, written to Delta. Then apps on Kafka (`_exercise_apps_on_kafka`).
    """

    class Count(StatefulProcessor):
        """A running count per key in a value state, as processors keep theirs."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.seen = handle.getValueState("seen", "n LONG")

        # transformWithStateInPandas passes pandas frames; the base class's type also allows
        # the Row API's rows.
        def handleInputRows(  # type: ignore[override]  # noqa: N802 - Spark's callback names
            self,
            key: tuple[object, ...],
            rows: Iterator[pd.DataFrame],
            timerValues: TimerValues,  # noqa: N803
        ) -> Iterator[pd.DataFrame]:
            total = sum(len(frame) for frame in rows)
            previous = self.seen.get()
            if previous is not None:
                total += previous[0]
            self.seen.update((total,))
            yield pd.DataFrame({"key": [key[0]], "count": [total]})

        def close(self) -> None:
            """Nothing to release."""

    spark = spark_session(settings, app_name="millrace-class-data")
    events = scratch / "events"
    events.mkdir()
    for part in range(2):
        rows = [
            json.dumps({"key": f"k{n % 5}", "time": f"2026-01-01T00:{n % 60:02d}:00Z", "n": n})
            for n in range(part * 100, part * 100 + 100)
        ]
        (events / f"part-{part}.json").write_text("\n".join(rows))
    records = spark.readStream.schema("key STRING, time TIMESTAMP, n BIGINT").json(str(events))
    table = scratch / "table"

    def write(batch: DataFrame, batch_id: int) -> None:
        # As result tables are written: appended to (mode final), merged into by key (updates).
        spark_append(batch, scratch / "appended", metadata=f"batch:{batch_id}")
        spark_merge(batch, table, ["window_start", "window_end", "key"])

    counts = (
        records.withWatermark("time", "1 minute")
        .groupBy(F.window("time", "10 minutes"), "key")
        .count()
        .select("window.start", "window.end", "key", "count")
        .withColumnsRenamed({"start": "window_start", "end": "window_end"})
    )
    _run(counts.writeStream.foreachBatch(write), scratch)
    spark_read(spark, table).where("count > 0").orderBy("key").collect()
    processed = records.groupBy("key").transformWithStateInPandas(
        Count(), "key STRING, count LONG", outputMode="Update", timeMode="None"
    )
    _run(spark_stream_writer(processed).option("path", f"{table}-processed"), scratch)
    _exercise_apps_on_kafka(spark, settings, scratch)
    stop_spark_session()


class _Tally(Processor):
    """A count per key in a value state, produced at each record and when its timer fires.

    The timer is a wall-clock one, so that the run registers a bucket's wake-up.
    """

    name = "archive_tally"
    inputs = [Input("archive.events", key="key", time="time")]  # noqa: RUF012 - the API's list
    seen: ValueState[int] = ValueState(int)

    def on_record(self, key: str, record: dict[str, object], ctx: Context) -> None:
        seen = (self.seen.get() or 0) + 1
        self.seen.set(seen)
        ctx.set_timer("report", processing_time_ms=ctx.processing_time_ms + 60_000)
        ctx.produce("archive.tallies", {"key": key, "seen": seen}, key=key)

    def on_timer(self, key: str, timer: Timer, ctx: Context) -> None:
        ctx.produce("archive.tallies", {"key": key, "seen": self.seen.get(0)}, key=key)


_SQL_APP = """\
CREATE APPLICATION archive_windows;
CREATE INPUT TABLE events (key STRING, time TIMESTAMP, n BIGINT)
  FROM STREAM('archive.events') TIME time LATENESS '1 second';
INSERT INTO STREAM('archive.kept') SELECT key, n, key AS record_key FROM events WHERE n % 2 = 0;
CREATE TABLE per_minute AS SELECT key, COUNT(*) AS events FROM events [1 minute] GROUP BY key;
"""


def _exercise_apps_on_kafka(spark: SparkSession, settings: Settings, scratch: Path) -> None:
    """Run a processor app and a SQL app as `millrace run` runs them, on a broker of their own.

    Every app reads and writes Kafka. Without this run a restarted processor's driver loaded
    9,500 of its 25,100 classes from their jars (`-Xlog:class+load`), among them 1,360 of
    Kafka's client; with it, 8,000 and 290. The broker listens on free loopback ports and
    keeps its data in `scratch`.
    """
    first_port = free_loopback_ports(2)
    workspace = Workspace(
        scratch / "workspace",
        replace(
            settings,
            kafka_bootstrap="",
            kafka_brokers=1,
            kafka_port=first_port,
            kafka_controller_port=first_port + 1,
        ),
    )
    start_broker(workspace)
    try:
        for stream in ("archive.events", "archive.tallies", "archive.kept"):
            create_stream(workspace.settings, stream, buckets=2)
        with Publisher("archive.events", settings=workspace.settings) as publisher:
            for n in range(200):
                event = {"key": f"k{n % 5}", "time": f"2026-01-01T00:{n % 60:02d}:00Z", "n": n}
                publisher.send(event, key=f"k{n % 5}")
        # Default triggers, as deployed apps run: their idle ticks and wake-ups too.
        processor = start_processor_app(spark, workspace, _Tally)
        sql_app = start_sql_app(spark, workspace, parse_app(_SQL_APP))
        for app in (processor, sql_app):
            app.process_all_available()
            app.stop()
    finally:
        stop_broker(workspace)


def _run(writer: DataStreamWriter, scratch: Path) -> None:
    checkpoint = scratch / f"checkpoint-{len(list(scratch.glob('checkpoint-*')))}"
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()


def _main() -> None:
    """Build the archive for the settings of the environment unless it exists, saying so."""
    settings = load_settings(None)
    archive = archive_file(settings, connector_jars(settings))
    if is_complete(archive):
        return
    print("setup: building the class-data archive of Spark's drivers (once, about a minute)")
    try:
        _build(settings, archive)
    except MillraceError as error:
        sys.exit(error.render())


if __name__ == "__main__":
    _main()
