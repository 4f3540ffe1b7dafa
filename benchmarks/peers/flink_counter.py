"""The per-key counter of benchmarks/processors.py in PyFlink, run from benchmarks/.venv-flink.

`benchmarks/.venv-flink/bin/python benchmarks/peers/flink_counter.py SETTINGS_JSON` reads the
input topic from its start to the offsets it has when the job starts (a bounded Kafka source,
parallelism 2), decodes each record's JSON in Python, assigns event times with 30 s of
lateness, counts per key in a `KeyedProcessFunction` whose `ValueState` lives in RocksDB
(`EmbeddedRocksDBStateBackend`) and emits each key's count once, on an event-time timer the
watermark passes at the end of the input, to the output topic through Kafka transactions
committed by exactly-once checkpoints. It prints one JSON line: the seconds from the first
record a task saw to the job's end (the last checkpoint's commit included; deploying the tasks
and starting their Python workers are not counted), the job's net run time as Flink reports it
(which counts them) and the settings it ran with.
"""

import json
import sys
import tempfile
import time
import uuid
from importlib import metadata
from pathlib import Path

from pyflink.common import Configuration, Duration, Types, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import CheckpointingMode, KeyedProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.datastream.state import ValueStateDescriptor

PARALLELISM = 2
CHECKPOINT_INTERVAL_MS = 2_000
TRANSACTION_TIMEOUT_MS = 300_000
"""Below the broker's transaction.max.timeout.ms (15 minutes), which Flink's 1 hour exceeds."""


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
    jar = Path(sys.prefix) / "jars" / f"flink-sql-connector-kafka-{run['connector']}.jar"
    checkpoints = Path(tempfile.mkdtemp(prefix="bench-flink-checkpoints-"))
    first_records = Path(tempfile.mkdtemp(prefix="bench-flink-first-records-"))
    config = Configuration()
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    config.set_string("execution.checkpointing.dir", checkpoints.as_uri())
    # Flink 2 chooses the state backend by configuration: "rocksdb" is the
    # EmbeddedRocksDBStateBackend.
    config.set_string("state.backend.type", "rocksdb")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.add_jars(jar.as_uri())
    env.set_parallelism(PARALLELISM)
    env.enable_checkpointing(CHECKPOINT_INTERVAL_MS, CheckpointingMode.EXACTLY_ONCE)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(run["bootstrap_servers"])
        .set_topics(run["input"])
        .set_group_id(f"bench-flink-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(run["bootstrap_servers"])
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(run["output"])
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"bench-flink-{uuid.uuid4().hex[:8]}")
        .set_property("transaction.timeout.ms", str(TRANSACTION_TIMEOUT_MS))
        .build()
    )
    lateness = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(run["lateness_ms"])
    ).with_timestamp_assigner(_RecordTime())
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "read")
        .map(_decoded, output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
        .assign_timestamps_and_watermarks(lateness)
        .key_by(lambda record: record[0], key_type=Types.STRING())
        .process(_Counter(run["emit_ms"], str(first_records)), output_type=Types.STRING())
        .sink_to(sink)
    )
    result = env.execute(f"bench-flink-{uuid.uuid4().hex[:8]}")
    ended = time.time()
    first = min(float(path.read_text()) for path in first_records.iterdir())
    print(
        json.dumps(
            {
                "processing_s": ended - first,
                "net_runtime_s": result.get_net_runtime() / 1000,
                "settings": {
                    "apache_flink": metadata.version("apache-flink"),
                    "kafka_connector": run["connector"],
                    "parallelism": PARALLELISM,
                    "state_backend": "EmbeddedRocksDBStateBackend",
                    "checkpointing": "EXACTLY_ONCE",
                    "checkpoint_interval_ms": CHECKPOINT_INTERVAL_MS,
                    "sink_delivery_guarantee": "EXACTLY_ONCE",
                    "python_execution_mode": "process",
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
