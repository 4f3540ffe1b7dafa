"""Building the class-data archive of Spark's driver JVM (`millrace.engine.class_archive`).

`python -m millrace.ops.class_archive_build` (run by scripts/setup.sh) starts a driver
that exercises what apps use (SQL, a stateful streaming aggregation,
`transformWithStateInPandas`, Delta reads, writes and merges) and has the JVM write the
classes it loaded when it exits. It builds only when no complete archive of this install's
name exists. It is a setup step of operations, apart from the engine: it starts a
SparkSession (`millrace.engine.session`), which itself names the archive to every driver it
starts, and writes Delta tables as apps do (`millrace.warehouse.delta`).
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
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from millrace.config.settings import Settings
from millrace.config.settings_loader import load_settings
from millrace.engine import spark_internals
from millrace.engine.class_archive import QUIET_SHARING, archive_file, is_complete
from millrace.engine.session import connector_jars, spark_session, stop_spark_session
from millrace.errors import MillraceError, SetupError
from millrace.warehouse.delta import spark_append, spark_merge, spark_read, spark_stream_writer


def _build(settings: Settings, archive: Path) -> None:
    """Write `archive` from a driver started in this process; `SetupError` when it could not.

    It takes about half a minute: the driver runs what apps run (`_exercise`), and its JVM
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
    value state on RocksDB, written to Delta.
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
    stop_spark_session()


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
