import time
from dataclasses import replace

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from millrace.bus.internal import create_internal_stream, read_after
from millrace.bus.publisher import Publisher
from millrace.bus.streams import (
    admin_client,
    appended_since,
    create_stream,
    delete_stream,
    describe_stream,
    format_retention,
    list_streams,
    replicas,
)
from millrace.config.settings import Settings
from millrace.errors import MillraceError, StreamExistsError, StreamNotFoundError


def test_a_stream_is_created_listed_described_and_deleted(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name, buckets=4, retention="3d")
    assert stream_name in list_streams(settings)

    with Publisher(stream_name, settings=settings) as publisher:
        for number in range(40):
            publisher.send({"n": number}, key=str(number))
    info = describe_stream(settings, stream_name)
    assert [bucket.bucket for bucket in info.buckets] == [0, 1, 2, 3]
    assert info.record_count == 40
    assert all(bucket.start_offset == 0 for bucket in info.buckets)
    assert sum(bucket.end_offset for bucket in info.buckets) == 40
    assert format_retention(info.retention_ms) == "3d"

    delete_stream(settings, stream_name)
    assert stream_name not in list_streams(settings)


def test_appended_since_counts_the_records_each_bucket_got_from_a_time_on(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name, buckets=2)
    with Publisher(stream_name, settings=settings) as publisher:
        for n in range(3):
            publisher.send({"n": n}, bucket=0)
    earlier, _ = read_after(settings, stream_name, {0: 0, 1: 0})
    last_arrival_ms = max(stamped.append_ms or 0 for stamped in earlier)
    # The bus stamps arrivals with this machine's clock, to the millisecond.
    while time.time() * 1000 <= last_arrival_ms + 1:
        time.sleep(0.001)
    with Publisher(stream_name, settings=settings) as publisher:
        for n in range(3, 6):
            publisher.send({"n": n}, bucket=n % 2)

    assert appended_since(settings, stream_name, last_arrival_ms + 1) == {0: 1, 1: 2}
    assert appended_since(settings, stream_name, 0) == {0: 4, 1: 2}
    assert appended_since(settings, stream_name, int(time.time() * 1000) + 60_000) == {0: 0, 1: 0}


def test_creating_an_existing_stream_is_refused_unless_asked_to_accept_it(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name)
    with pytest.raises(StreamExistsError, match="already exists"):
        create_stream(settings, stream_name)
    create_stream(settings, stream_name, exist_ok=True)


def test_a_missing_stream_is_reported_with_how_to_create_it(settings: Settings) -> None:
    with pytest.raises(StreamNotFoundError) as raised:
        describe_stream(settings, "no.such.stream")
    assert "millrace stream create no.such.stream" in raised.value.hint
    with pytest.raises(StreamNotFoundError):
        delete_stream(settings, "no.such.stream")


@pytest.mark.parametrize(
    ("name", "buckets", "retention", "complaint"),
    [
        ("has space", 1, "1d", "not a valid stream name"),
        ("_internal", 1, "1d", "not a valid stream name"),
        ("x" * 201, 1, "1d", "not a valid stream name"),
        ("fine", 0, "1d", "0 buckets is out of range"),
        ("fine", 5000, "1d", "5000 buckets is out of range"),
        ("fine", 1, "soon", "is not a duration"),
        ("fine", 1, "0s", "must be longer than zero"),
    ],
)
def test_invalid_names_and_settings_are_refused_before_reaching_kafka(
    settings: Settings,
    name: str,
    buckets: int,
    retention: str,
    complaint: str,
) -> None:
    with pytest.raises(MillraceError, match=complaint):
        create_stream(settings, name, buckets=buckets, retention=retention)


def test_retention_forever_keeps_records_without_a_time_limit(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name, retention="forever")
    assert format_retention(describe_stream(settings, stream_name).retention_ms) == "forever"


def _topic_settings(settings: Settings, name: str) -> tuple[int, str]:
    """The copies of bucket 0 of stream `name`, and its `min.insync.replicas`."""
    admin = admin_client(settings)
    metadata = admin.list_topics(topic=name, timeout=10).topics[name]
    resource = ConfigResource(ResourceType.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return len(metadata.partitions[0].replicas), configs["min.insync.replicas"].value


def test_a_stream_has_a_copy_per_broker_up_to_three_and_writes_wait_for_two_of_three(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    create_internal_stream(settings, f"_millrace.test-{stream_name[5:]}")

    # The test's bus has one broker: one copy, and a write waits for it alone.
    assert _topic_settings(settings, stream_name) == (1, "1")
    assert _topic_settings(settings, f"_millrace.test-{stream_name[5:]}") == (1, "1")
    assert [replicas(0, brokers) for brokers in (1, 2, 3, 5)] == [1, 2, 3, 3]


def test_more_copies_than_the_bus_has_brokers_is_an_error_naming_the_setting(
    settings: Settings, stream_name: str
) -> None:
    with pytest.raises(MillraceError, match=stream_name) as refused:
        create_stream(replace(settings, kafka_replication=3), stream_name)
    assert "replication factor of 3 cannot be reached" in refused.value.message
    assert refused.value.hint.startswith("set kafka.replication to at most the bus's brokers")
    assert stream_name not in list_streams(settings)
