"""The class-data archive of Spark's driver JVM: built once per install, mapped by every start.

A Spark driver loads and verifies some 20,000 classes before its first micro-batch. Java's
class-data sharing (CDS) keeps them parsed and verified in an archive file that a JVM maps
instead. On the 2-core machine a driver's start and first work (an aggregation and a Delta
write) took a median 6.0 s and 9.6 s of JVM CPU with the archive, against 8.9 s and 14.2 s
without (`benchmarks/driver_start.py --rounds 5`, docs/benchmarks.md#driver-start). Every
`millrace run`, `deploy`, `restart`, `rollback` and recovery after a kill starts a driver, so
each of them gains.

`python -m millrace.engine.class_archive` (run by scripts/setup.sh) starts a driver that
exercises what apps use (SQL, a stateful streaming aggregation, `transformWithStateInPandas`,
Delta reads, writes and merges) and has the JVM write the classes it loaded when it exits.
`driver_options` names the archive to each driver start. The archive's name carries a
fingerprint of the Java executable and of every jar on the driver's classpath: a JVM refuses
an archive written for another classpath, so a changed install simply finds no archive of its
name (and starts as before) until setup builds the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming import DataStreamWriter

from millrace.config.jvm import jars_dir, java_executable
from millrace.config.settings import Settings, load_settings
from millrace.errors import MillraceError, SetupError

# The first four bytes of a complete dynamic archive (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC,
# little-endian). The JVM writes them last, so a file cut short by a crash lacks them.
_DYNAMIC_ARCHIVE_MAGIC = bytes.fromhex("a8ab0bf0")
# A mismatched or unreadable archive is then skipped silently, as the JVM does by default
# (-Xshare:auto), instead of printing a warning into the app's log.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_file(settings: Settings, classpath: list[Path]) -> Path:
    """Where the archive of a driver with the jars `classpath` beside PySpark's own lives.

    It may not exist: setup builds it, for this install's Java and connectors.

    Example:
        >>> archive_file(Settings(jvm_jars_dir="/opt/jars"), []).name.startswith("spark-driver-")
        True
    """
    name = f"spark-driver-{_fingerprint(classpath)}.jsa"
    return jars_dir(settings) / "class-data" / name


def driver_options(settings: Settings, classpath: list[Path]) -> str:
    """The JVM options that map the archive into a driver; empty when there is no archive.

    Example:
        >>> driver_options(Settings(jvm_jars_dir="/nowhere"), [])
        ''
    """
    archive = archive_file(settings, classpath)
    if not _complete(archive):
        return ""
    return f"-XX:SharedArchiveFile={archive} {_QUIET}"


def _build(settings: Settings, archive: Path) -> None:
    """Write `archive` from a driver started in this process; `SetupError` when it could not.

    It takes about half a minute: the driver runs what apps run (`_exercise`), and its JVM
    writes the archive as it exits, beside the archive's name, which it takes once complete.
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    written = archive.with_suffix(f".{os.getpid()}.partial")
    dump = f"-XX:ArchiveClassesAtExit={written} {_QUIET}"
    options = f"{settings.spark_driver_java_options} {dump}".strip()
    with tempfile.TemporaryDirectory(prefix="millrace-class-data-") as scratch:
        _exercise(replace(settings, spark_driver_java_options=options), Path(scratch))
        _stop_jvm()
    if not _complete(written):
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


def _complete(archive: Path) -> bool:
    try:
        with archive.open("rb") as file:
            return file.read(len(_DYNAMIC_ARCHIVE_MAGIC)) == _DYNAMIC_ARCHIVE_MAGIC
    except OSError:
        return False


def _fingerprint(classpath: list[Path]) -> str:
    """A hash of what a driver's archive depends on.

    That is the Java executable and the jars on the driver's classpath (PySpark's own and
    `classpath`), each by path, size and change time.
    """
    java = Path(os.path.realpath(java_executable()))
    pyspark_jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    digest = hashlib.sha256()
    for file in [java, *pyspark_jars, *classpath]:
        status = file.stat()
        digest.update(f"{file}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _exercise(settings: Settings, scratch: Path) -> None:
    """Start a driver and run in it what apps run, so that the archive holds their classes.

    SQL apps: a windowed count with a watermark over a streaming source, merged into a Delta
    table through `foreachBatch`, read back. Processors: `transformWithStateInPandas` with a
    value state on RocksDB, written to Delta.
    """
    # Deferred: the session imports this module for `driver_options`, and only the build
    # needs pandas and the processor API.
    from collections.abc import Iterator

    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import (
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
    )

    from millrace.engine.session import spark_session, stop_spark_session

    class Count(StatefulProcessor):
        """A running count per key in a value state, as processors keep theirs."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.seen = handle.getValueState("seen", "n LONG")

        def handleInputRows(  # type: ignore[override]  # noqa: N802 - Spark's callback names
            self,
            key: tuple,
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
    table = str(scratch / "table")

    def merge(batch: DataFrame, batch_id: int) -> None:
        batch.write.format("delta").mode("append").save(table)
        spark.sql(
            f"MERGE INTO delta.`{table}` AS t USING (SELECT * FROM delta.`{table}` LIMIT 1) AS s"
            " ON t.key = s.key WHEN MATCHED THEN UPDATE SET t.count = s.count"
        )

    counts = (
        records.withWatermark("time", "1 minute")
        .groupBy(F.window("time", "10 minutes"), "key")
        .count()
        .select("key", "count")
    )
    _run(counts.writeStream.foreachBatch(merge), scratch)
    spark.read.format("delta").load(table).where("count > 0").orderBy("key").collect()
    processed = records.groupBy("key").transformWithStateInPandas(
        Count(), "key STRING, count LONG", outputMode="Update", timeMode="None"
    )
    _run(processed.writeStream.format("delta").option("path", f"{table}-processed"), scratch)
    stop_spark_session()


def _run(writer: DataStreamWriter, scratch: Path) -> None:
    checkpoint = scratch / f"checkpoint-{len(list(scratch.glob('checkpoint-*')))}"
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()


def _stop_jvm() -> None:
    """End the driver's JVM and wait for it.

    It writes the archive as it exits, which it does once the pipe on its stdin closes.
    """
    gateway = SparkContext._gateway
    assert gateway is not None, "_exercise started the JVM gateway"
    gateway.proc.stdin.close()
    gateway.proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


def _main() -> None:
    """Build the archive for the settings of the environment unless it exists, saying so."""
    # Deferred: the session imports this module for `driver_options`.
    from millrace.engine.session import connector_jars

    settings = load_settings(None)
    archive = archive_file(settings, connector_jars(settings))
    if _complete(archive):
        return
    print("setup: building the class-data archive of Spark's drivers (once, about a minute)")
    try:
        _build(settings, archive)
    except MillraceError as error:
        sys.exit(error.render())


if __name__ == "__main__":
    _main()
