"""An app's latency, as `ps`, `top`, /metrics and the dashboard show it: from a record's
arrival on the bus to the end of the micro-batch that read it, median and 99th percentile.
Checked against the quantiles of the same records computed in plain Python, and against a
processor's productions' own arrival times read straight from the bus."""

import json
import time
import uuid

from pyspark.sql import SparkSession

from millrace import Input, Processor
from millrace.apps.processors.streaming import start_processor_app
from millrace.bus.internal import read_after
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.arrival_quantiles import ARRIVAL_LEVELS
from millrace.monitor.latency import recent_latency
from millrace.monitor.metrics_log import Batch, MetricsLog
from millrace.monitor.status import app_status
from tests.plain_producer import plain_producer

START_MS = 1_767_225_600_000


def _quantile(values: list[float], level: float) -> float:
    """The `level` quantile of `values`, interpolated between the two closest ranks."""
    ordered = sorted(values)
    position = level * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _batch(batch_id: int, end_ms: int, arrivals_ms: list[float]) -> Batch:
    """A batch as its metrics record tells it, that ended at `end_ms` and read `arrivals_ms`."""
    fields = {
        "batch_duration_ms": 1000,
        "inputs": {
            "clicks": {
                "arrivals": len(arrivals_ms),
                "arrival_ms": [round(_quantile(arrivals_ms, level)) for level in ARRIVAL_LEVELS],
            }
        },
    }
    return Batch("app", "app.q", "run", batch_id, end_ms - 1000, fields)


def test_the_latency_of_several_batches_is_that_of_all_their_records() -> None:
    # 1,000 records waited 1 to 2 s for their batch's end, 3,000 of the next batch 3 to 4 s.
    first = [10_000 - 1000 - n for n in range(1000)]
    second = [20_000 - 3000 - n / 3 for n in range(3000)]
    latencies = [10_000 - ms for ms in first] + [20_000 - ms for ms in second]

    latency = recent_latency([_batch(0, 10_000, first), _batch(1, 20_000, second)])

    assert latency is not None
    assert latency.records == 4000
    assert abs(latency.median_s - _quantile(latencies, 0.5) / 1000) < 0.005
    assert abs(latency.p99_s - _quantile(latencies, 0.99) / 1000) < 0.005


def test_one_record_has_its_own_latency_and_no_record_has_none() -> None:
    latency = recent_latency([_batch(0, 5_000, [4_250])])
    assert latency is not None
    assert (latency.records, latency.median_s, latency.p99_s) == (1, 0.75, 0.75)
    idle = Batch("app", "app.q", "run", 1, 6_000, {"inputs": {"clicks": {"arrivals": 0}}})
    assert recent_latency([idle]) is None


def test_a_processors_latency_is_its_productions_arrival_plus_at_most_the_rest_of_its_batch(
    spark: SparkSession, workspace: Workspace
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, target = f"lat.in.{suffix}", f"lat.out.{suffix}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, target, buckets=1)

    class Echo(Processor):
        name = f"latency_{suffix}"
        inputs = [Input(source, key="n", time="ts", lateness="10s")]  # noqa: RUF012

        def on_record(self, key, record, ctx):
            ctx.produce(target, record)

    running = start_processor_app(spark, workspace, Echo)
    try:
        producer = plain_producer(workspace.settings)
        # One record through first, so that the app's start is not what is measured.
        producer.produce(source, json.dumps({"n": -1, "ts": START_MS}))
        producer.flush()
        _appended(workspace, target, 1)
        # 300 records over about 3 s.
        for n in range(300):
            producer.produce(source, json.dumps({"n": n, "ts": START_MS + n}))
            producer.poll(0)
            time.sleep(0.01)
        producer.flush()
        arrived = _appended(workspace, source, 301)
        produced = _appended(workspace, target, 301)
    finally:
        running.stop()
    batches = _published_batches(workspace, Echo.name, 301)

    # Each record's latency: the end of the batch that read it (by its offsets) minus its
    # arrival. Its production arrived before that end.
    own = []
    for n, (bucket, offset, arrival_ms) in arrived.items():
        [end_ms] = [
            batch.time_ms + int(batch.fields["batch_duration_ms"])
            for batch in batches
            if _read(batch, source, bucket, offset)
        ]
        assert produced[n][2] <= end_ms + CLOCK_STEP_MS, (n, produced[n], end_ms)
        own.append((end_ms - arrival_ms) / 1000)
    latency = recent_latency(batches)
    assert latency is not None
    assert latency.records == 301
    # The quantiles shown are those of the records' own latencies, but for Spark's rank error
    # and each batch taken as spread linearly between its quantiles.
    spread = max(own) - min(own)
    assert abs(latency.median_s - _quantile(own, 0.5)) <= 0.05 * spread + 0.01
    assert abs(latency.p99_s - _quantile(own, 0.99)) <= 0.05 * spread + 0.01
    # `ps`, `top`, /metrics and the dashboard show the status's: the last minute's batches.
    newest = max(batch.time_ms for batch in batches)
    metrics = MetricsLog(workspace.settings)
    metrics.refresh()
    status = app_status(workspace, Echo.name, metrics, now_ms=newest)
    assert status.latency == recent_latency(
        [batch for batch in batches if batch.time_ms >= newest - 60_000]
    )


CLOCK_STEP_MS = 1
"""How far apart two readings of the same instant may be: the bus's and Spark's, in ms."""


def _appended(workspace: Workspace, stream: str, count: int) -> dict[int, tuple[int, int, int]]:
    """Each record of `stream` by its `n`: bucket, offset, append time; once `count` are there."""
    found: dict[int, tuple[int, int, int]] = {}
    positions: dict[int, int] = {}
    deadline = time.monotonic() + 90
    while len(found) < count and time.monotonic() < deadline:
        records, positions = read_after(workspace.settings, stream, positions, since_ms=0)
        for stamped in records:
            record = stamped.record
            assert stamped.append_ms is not None
            found[int(record.value["n"])] = (record.bucket, record.offset, stamped.append_ms)
        time.sleep(0.2)
    assert len(found) == count, f"{len(found)} of {count} records on {stream}"
    return found


def _published_batches(workspace: Workspace, app: str, records: int) -> list[Batch]:
    """The batches `app` published, once they have read `records` records."""
    metrics = MetricsLog(workspace.settings)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metrics.refresh()
        batches = metrics.batches(app)
        if sum(int(batch.fields["input_rows"]) for batch in batches) >= records:
            return batches
        time.sleep(0.5)
    raise AssertionError(f"{app}'s batches did not read {records} records in 60 s")


def _read(batch: Batch, stream: str, bucket: int, offset: int) -> bool:
    """Whether `batch` read the record at `offset` of bucket `bucket` of `stream`."""
    for source in batch.sources:
        # A query's first batch has no start offsets: it reads from the start of the stream.
        start = (source.get("start_offsets") or {}).get(stream, {}).get(str(bucket), 0)
        end = (source.get("end_offsets") or {}).get(stream, {}).get(str(bucket))
        if end is not None and start <= offset < end:
            return True
    return False
