"""What a session's queries last reported (millrace.engine.progress): what the idle ticker, the
output watermark and an app's progress lines read instead of asking each query every second."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress
from pyspark.sql.streaming.query import StreamingQuery

from millrace.engine.progress import app_progresses, last_progress, watch
from millrace.errors import EngineError


def _counting(spark: SparkSession, name: str) -> StreamingQuery:
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .load()
        .writeStream.format("noop")
        .queryName(name)
        .start()
    )


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_watched_query_reports_the_progress_spark_gives_and_is_one_of_its_apps_queries(
    spark: SparkSession,
) -> None:
    app = f"probe_{uuid.uuid4().hex[:8]}"
    watch(spark)
    watch(spark)  # twice is harmless: one listener per session
    query = _counting(spark, f"{app}.count")
    try:
        _wait_for(lambda: (reported := last_progress(query)) is not None and reported.batchId >= 2)
        # Spark's own last progress and the one the listener got agree once both are on a batch.
        _wait_for(lambda: _batch_id(last_progress(query)) == query.lastProgress["batchId"])
        reported = last_progress(query)
        assert reported is not None
        assert reported.name == f"{app}.count"
        assert str(reported.runId) == query.runId
        assert [str(p.runId) for p in app_progresses(app) if p is not None] == [query.runId]
        assert app_progresses(f"{app}_other") == []
    finally:
        query.stop()
    _wait_for(lambda: app_progresses(app) == [])
    assert last_progress(query) is not None, "a stopped query keeps its last progress"


def test_a_query_started_before_its_session_was_watched_is_an_error_that_says_so(
    spark: SparkSession,
) -> None:
    unwatched = spark.newSession()
    query = _counting(unwatched, f"probe_{uuid.uuid4().hex[:8]}.count")
    try:
        with pytest.raises(EngineError, match="not followed") as raised:
            last_progress(query)
        assert raised.value.hint is not None and "watch" in raised.value.hint
    finally:
        query.stop()


def _batch_id(progress: StreamingQueryProgress | None) -> int | None:
    return None if progress is None else progress.batchId
