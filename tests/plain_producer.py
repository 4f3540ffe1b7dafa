"""A plain Kafka producer for tests that publish as a user's own producer does: no id or
time headers, only the records they give, each bucket in the order they send it.

The order needs idempotence. The suite's broker is started for the run, and a test's stream
is created just before it is written: the first requests to a new bucket can fail while
the bucket has no leader yet, and a producer without idempotence retries them behind the
requests that followed, so that a bucket's first thousands of records land after the rest
(seen as a skewed backlog losing half a bucket as late, one run in five). An idempotent
producer keeps each bucket's order through retries, as millrace's own `Publisher` does.
"""

from __future__ import annotations

from confluent_kafka import Producer

from millrace.config.settings import Settings


def plain_producer(settings: Settings, **config: str | int) -> Producer:
    """A producer to the bus of `settings` that keeps each bucket's order; `config` adds options."""
    return Producer(
        {"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True, **config}
    )
