"""The per-key counter of benchmarks/processors.py in PyFlink, run from benchmarks/.venv-flink.

`benchmarks/.venv-flink/bin/python benchmarks/peers/flink_counter.py SETTINGS_JSON` reads the
input topic from its start to the offsets it has when the job starts (a bounded Kafka source,
parallelism 2), decodes each record's JSON in Python, assigns event times with 30 s of
lateness, counts per key in a `KeyedProcessFunction` whose `ValueState` lives in RocksDB
(`EmbeddedRocksDBStateBackend`) and emits each key's count once, on an event-time timer the
watermark passes at the end of the input, to the output topic through Kafka transactions
committed by exactly-once checkpoints (`flink_kafka`). It prints one JSON line: the seconds
from the first record a task saw to the job's end (the last checkpoint's commit included;
deploying the tasks and starting their Python workers are not counted), the job's net run
time as Flink reports it (which counts them) and the settings it ran with.
"""

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from flink_kafka import environment, exactly_once_sink, kafka_source, settings
from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import ValueStateDescriptor

CHECKPOINT_INTERVAL_MS = 2_000


class _RecordTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class _Counter(KeyedProcessFunction):
    """A count per key in keyed state, emitted when the watermark passes `emit_ms`."""

    def __init__(self, emit_ms, first_records):
        self.emit_ms = emit_ms
        self.first_records = first_records

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.started = False

    def process_element(self, value, ctx):
        if not self.started:
            # Tasks run in Python workers of their own: each leaves its first record's time.
            self.started = True
            Path(self.first_records, uuid.uuid4().hex).write_text(str(time.time()))
        count = self.count.value()
        if count is None:
            ctx.timer_service().register_event_time_timer(self.emit_ms)
            count = 0
        self.count.update(count + 1)

    def on_timer(self, timestamp, ctx):
        yield json.dumps({"key": ctx.get_current_key(), "count": self.count.value()})


def _decoded(value):
    record = json.loads(value)
    return record["key"], record["time"]


def main() -> None:
    run = json.loads(sys.argv[1])
    first_records = Path(tempfile.mkdtemp(prefix="bench-flink-first-records-"))
    env = environment(run, CHECKPOINT_INTERVAL_MS)
    lateness = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(run["lateness_ms"])
    ).with_timestamp_assigner(_RecordTime())
    (
        env.from_source(kafka_source(run, bounded=True), WatermarkStrategy.no_watermarks(), "read")
        .map(_decoded, output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
        .assign_timestamps_and_watermarks(lateness)
        .key_by(lambda record: record[0], key_type=Types.STRING())
        .process(_Counter(run["emit_ms"], str(first_records)), output_type=Types.STRING())
        .sink_to(exactly_once_sink(run))
    )
    result = env.execute(f"bench-flink-{uuid.uuid4().hex[:8]}")
    ended = time.time()
    first = min(float(path.read_text()) for path in first_records.iterdir())
    print(
        json.dumps(
            {
                "processing_s": ended - first,
                "net_runtime_s": result.get_net_runtime() / 1000,
                "settings": settings(run, CHECKPOINT_INTERVAL_MS),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
