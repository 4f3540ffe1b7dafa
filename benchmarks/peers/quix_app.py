"""What the Quix Streams jobs of benchmarks/peers/ share: their application and its settings.

A job is a Quix Streams `Application` of a consumer group of its own that reads its input
from the start with `processing_guarantee="exactly-once"` (Kafka transactions: what it
writes is visible once the checkpoint after it commits), its state in RocksDB with changelog
topics, all partitions read by one consumer.
"""

import tempfile
import uuid
from importlib import metadata

from quixstreams import Application


def application(run, **options):
    """The job's `Application` on the benchmark's broker; `options` add to its arguments."""
    return Application(
        broker_address=run["bootstrap_servers"],
        consumer_group=f"bench-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=tempfile.mkdtemp(prefix="bench-quix-state-"),
        use_changelog_topics=True,
        **options,
    )


def settings(**job):
    """The version and settings a job ran with, `job`'s own added, for the benchmark's result."""
    return {
        "quixstreams": metadata.version("quixstreams"),
        "processing_guarantee": "exactly-once",
        "state": "RocksDB, changelog topics",
        "partitions": "one consumer, both partitions",
        **job,
    }
