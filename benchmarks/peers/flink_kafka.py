"""What the PyFlink jobs of benchmarks/peers/ share: their environment, Kafka in and out.

A job runs on Flink's local mini-cluster with parallelism 2, its keyed state in RocksDB
(`EmbeddedRocksDBStateBackend`) and exactly-once checkpoints, reads a topic from its start
with Flink's Kafka source, and writes through Flink's Kafka sink in Kafka transactions that
those checkpoints commit: a reader that reads committed records sees a record once the
checkpoint after it is done. `settings` says all this as a benchmark's result records it.
"""

import sys
import tempfile
import uuid
from importlib import metadata
from pathlib import Path

from pyflink.common import Configuration
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)

PARALLELISM = 2
TRANSACTION_TIMEOUT_MS = 300_000
"""Below the broker's transaction.max.timeout.ms (15 minutes), which Flink's 1 hour exceeds."""


def environment(run, checkpoint_interval_ms):
    """The job's environment: Kafka's connector, RocksDB, exactly-once checkpoints."""
    jar = Path(sys.prefix) / "jars" / f"flink-sql-connector-kafka-{run['connector']}.jar"
    checkpoints = Path(tempfile.mkdtemp(prefix="bench-flink-checkpoints-"))
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
    env.enable_checkpointing(checkpoint_interval_ms, CheckpointingMode.EXACTLY_ONCE)
    return env


def kafka_source(run, *, bounded):
    """The input topic from its start; with `bounded`, to the offsets it has at the start."""
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(run["bootstrap_servers"])
        .set_topics(run["input"])
        .set_group_id(f"bench-flink-{uuid.uuid4().hex[:8]}")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_value_only_deserializer(SimpleStringSchema())
    )
    if bounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    return builder.build()


def exactly_once_sink(run):
    """The output topic, written in transactions that the checkpoints commit."""
    return (
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


def settings(run, checkpoint_interval_ms):
    """The versions and settings a job ran with, for the benchmark's result."""
    return {
        "apache_flink": metadata.version("apache-flink"),
        "kafka_connector": run["connector"],
        "parallelism": PARALLELISM,
        "state_backend": "EmbeddedRocksDBStateBackend",
        "checkpointing": "EXACTLY_ONCE",
        "checkpoint_interval_ms": checkpoint_interval_ms,
        "sink_delivery_guarantee": "EXACTLY_ONCE",
        "python_execution_mode": "process",
    }
