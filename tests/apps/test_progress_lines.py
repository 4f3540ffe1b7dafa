"""The lines an app's run prints (millrace.apps.progress_lines): a line per micro-batch it ran,
and totals that add up every record it read, quiet spells included."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from millrace.apps.progress_lines import ProgressLines
from millrace.engine.progress import watch


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_the_batch_after_a_quiet_spell_gets_its_own_line_and_counts_in_the_totals(
    spark: SparkSession, tmp_path: Path
) -> None:
    session = spark.newSession()
    # Spark reports a quiet query every 10 s by default: sooner, so that the test sees one.
    session.conf.set("spark.sql.streaming.noDataProgressEventInterval", "200ms")
    watch(session)
    app = f"lines_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "first.json").write_text('{"n": 1}\n')
    query = (
        session.readStream.schema("n INT")
        .json(str(folder))
        .writeStream.format("noop")
        .queryName(f"{app}.copy")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    lines = ProgressLines(app)
    said: list[str] = []

    def lines_said() -> int:
        lines.say_new([query], said.append)
        return len(said)

    try:
        _wait_for(lambda: lines_said() == 1)
        # Spark's own recent progress now holds a report of the quiet query: no records, and
        # the id of the micro-batch to come.
        _wait_for(lambda: any(p["batchId"] == 1 for p in query.recentProgress))
        (folder / "second.json").write_text('{"n": 2}\n{"n": 3}\n')
        _wait_for(lambda: lines_said() == 2)
    finally:
        query.stop()
    lines.say_new([query], said.append, stopped=True)

    assert len(said) == 2, said
    assert said[0].startswith(f"{app}.copy: batch 0, 1 record read "), said
    assert said[1].startswith(f"{app}.copy: batch 1, 2 records read "), said
    totals = lines.totals[f"{app}.copy"]
    assert (totals.batches, totals.read) == (2, 3)
