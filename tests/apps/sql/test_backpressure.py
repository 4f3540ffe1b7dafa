"""A backlog or a burst is read in micro-batches of bounded size (the setting's cap, or the
app's own), and an app catches up after a burst with its results exact."""

import threading
import time
import uuid
from dataclasses import replace

import pytest
from pyspark.sql import SparkSession

from millrace.apps.progress_lines import ProgressLines
from millrace.apps.sql.running import start_sql_app
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.checkpoint_log import kafka_offsets, records_waiting
from millrace.sql.parser import parse_app

RECORDS = 2_500
START_MS = 1_767_225_600_000


def _app(name: str, source: str, output: str, own_cap: int | None = None) -> str:
    options = "" if own_cap is None else f" WITH (max_records_per_batch = '{own_cap}')"
    return (
        f"CREATE APPLICATION {name}{options};\n"
        f"CREATE INPUT TABLE events (time, n INT) FROM STREAM('{source}') TIME time;\n"
        f"INSERT INTO STREAM('{output}') SELECT n FROM events WHERE n % 3 = 0;\n"
    )


@pytest.fixture
def backlog(workspace: Workspace) -> str:
    """A stream of 2 buckets holding `RECORDS` records that no app has read yet."""
    stream = f"test.backlog.{uuid.uuid4().hex[:8]}"
    create_stream(workspace.settings, stream, buckets=2)
    with Publisher(stream, settings=workspace.settings) as out:
        for number in range(RECORDS):
            out.send({"time": START_MS + number, "n": number})
    return stream


def _drain(
    spark: SparkSession, workspace: Workspace, backlog: str, **cap: int
) -> tuple[list[int], list[str]]:
    """Run an app over `backlog` to its end; the records each micro-batch read, and its lines.

    Its output must hold exactly the records plain Python selects, however it was cut.
    """
    run = uuid.uuid4().hex[:8]
    output = f"test.backlog-out.{run}"
    create_stream(workspace.settings, output)
    app = parse_app(_app(f"backlog_{run}", backlog, output, cap.get("own")))
    running = start_sql_app(spark, workspace, app, available_now=True)
    running.await_termination()
    [query] = running.queries
    written = tail(output, TailStart(from_beginning=True), settings=workspace.settings)
    assert sorted(int(record.value["n"]) for record in written) == list(range(0, RECORDS, 3))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    return sizes, ProgressLines(app.name).new_batches(query, stopped=True)


def test_a_backlog_is_read_in_micro_batches_no_larger_than_the_settings_cap(
    spark: SparkSession, workspace: Workspace, backlog: str
) -> None:
    capped = replace(
        workspace, settings=replace(workspace.settings, spark_max_records_per_batch=1_000)
    )

    sizes, lines = _drain(spark, capped, backlog)

    assert sum(sizes) == RECORDS
    assert len(sizes) >= 3 and max(sizes) <= 1_000
    # Every batch but the last left records for the next: its line says so.
    assert all("catching up" in line for line in lines[:-1]), lines
    assert f"catching up: {RECORDS - sizes[0]} records waiting" in lines[0]
    assert "catching up" not in lines[-1]


def test_an_apps_own_cap_wins_over_the_setting_and_0_reads_all_there_is_at_once(
    spark: SparkSession, workspace: Workspace, backlog: str
) -> None:
    capped = replace(
        workspace, settings=replace(workspace.settings, spark_max_records_per_batch=1_000)
    )
    unlimited = replace(
        workspace, settings=replace(workspace.settings, spark_max_records_per_batch=0)
    )

    own, _ = _drain(spark, capped, backlog, own=400)
    whole, _ = _drain(spark, unlimited, backlog)

    assert sum(own) == RECORDS and max(own) <= 400
    assert whole == [RECORDS]


# Records per second: steady, then five times as many for the burst, then steady again.
STEADY, BURST = 100, 500
PHASES = ((STEADY, 15), (BURST, 30), (STEADY, 45))
BURST_CAP = 1_000


def _publish_at_rates(workspace: Workspace, stream: str, sent: list[int]) -> None:
    """Publish `PHASES`' records, a second's worth at the start of each second."""
    with Publisher(stream, settings=workspace.settings) as out:
        for rate, seconds in PHASES:
            for _ in range(seconds):
                second_ends = time.monotonic() + 1
                for _ in range(rate):
                    out.send({"time": START_MS + len(sent), "n": len(sent)})
                    sent.append(len(sent))
                out.flush()
                time.sleep(max(0.0, second_ends - time.monotonic()))


def test_after_a_five_times_burst_the_lag_comes_back_and_no_micro_batch_passes_the_cap(
    spark: SparkSession, workspace: Workspace
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.burst.{run}", f"test.burst-out.{run}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, output)
    capped = replace(
        workspace, settings=replace(workspace.settings, spark_max_records_per_batch=BURST_CAP)
    )
    app = parse_app(_app(f"burst_{run}", source, output))
    sent: list[int] = []
    publisher = threading.Thread(target=_publish_at_rates, args=(workspace, source, sent))
    # Batch id: (when it was seen, records read, records it left waiting).
    batches: dict[int, tuple[float, int, int]] = {}
    running = start_sql_app(spark, capped, app)
    [query] = running.queries
    started = time.monotonic()
    publisher.start()
    try:
        # Until every record sent is read: a last micro-batch that left none waiting may
        # have come before the publisher's last second was.
        while publisher.is_alive() or sum(read for _, read, _ in batches.values()) < len(sent):
            assert time.monotonic() - started < sum(s for _, s in PHASES) + 120, batches
            for progress in query.recentProgress:
                if progress.numInputRows and progress.batchId not in batches:
                    waiting = records_waiting(
                        {
                            "end_offsets": kafka_offsets(read.endOffset),
                            "latest_offsets": kafka_offsets(read.latestOffset),
                        }
                        for read in progress.sources
                    )
                    seen = time.monotonic() - started
                    batches[progress.batchId] = (seen, progress.numInputRows, waiting)
            time.sleep(0.5)
    finally:
        publisher.join()
        running.stop()

    assert max(read for _, read, _ in batches.values()) <= BURST_CAP
    # The lag before the burst, and how soon after the burst's end it is back to that.
    burst_from, burst_to = PHASES[0][1], PHASES[0][1] + PHASES[1][1]
    before = max((waiting for seen, _, waiting in batches.values() if seen < burst_from), default=0)
    back_at = min(
        seen for seen, _, waiting in batches.values() if seen > burst_to and waiting <= before
    )
    assert back_at - burst_to < 30, batches
    written = tail(output, TailStart(from_beginning=True), settings=workspace.settings)
    assert sorted(int(record.value["n"]) for record in written) == [n for n in sent if n % 3 == 0]
