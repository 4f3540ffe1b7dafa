import dataclasses
import os
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from millrace.bus.publisher import Publisher, publish
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.errors import DeliveryError, PublishError, StreamNotFoundError
from millrace.records import future_dated_reason

SET = AlterConfigOpType.SET
JAN_1 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds


def test_published_events_come_back_with_their_ids_keys_and_event_times(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name, buckets=2)
    sent = {}
    with Publisher(stream_name, settings=settings) as publisher:
        sent[publisher.send({"time": "2026-01-01T00:00:00Z", "n": 1}, key="a")] = JAN_1
        sent[publisher.send({"time": JAN_1 + 5, "n": 2}, key="b")] = JAN_1 + 5
        sent[publisher.send({"time": JAN_1 / 1000 + 7, "n": 3})] = JAN_1 + 7000
        sent[publisher.send({"time": "2026-01-01T01:00:00+01:00", "n": 4})] = JAN_1
        sent[publisher.send({"time": datetime(2026, 1, 1, tzinfo=UTC), "n": 5})] = JAN_1
        sent[publisher.send({"n": 6}, record_id="chosen-id")] = None
    assert publisher.delivered == 6

    records = list(tail(stream_name, TailStart(from_beginning=True), settings=settings))
    assert {record.id for record in records} == set(sent)
    by_id = {record.id: record for record in records}
    for record_id, time_ms in sent.items():
        if time_ms is not None:
            assert by_id[record_id].time_ms == time_ms
    assert abs(by_id["chosen-id"].time_ms - time.time() * 1000) < 60_000
    assert {record.value["n"]: record.key for record in records}[1] == "a"


def test_publish_sends_one_event_and_returns_its_id(settings: Settings, stream_name: str) -> None:
    create_stream(settings, stream_name)
    record_id = publish(stream_name, {"page": "/"}, key="user-7", settings=settings)
    [record] = tail(stream_name, TailStart(from_beginning=True), settings=settings)
    assert (record.id, record.key, record.value) == (record_id, "user-7", {"page": "/"})


@pytest.mark.parametrize(
    ("event", "complaint"),
    [
        ([1, 2], "must be a JSON object"),
        ({"time": "last tuesday"}, "neither an ISO-8601 time nor an epoch number"),
        ({"time": True}, "neither an ISO-8601 time nor an epoch number"),
        ({"time": 1e17}, "neither an ISO-8601 time nor an epoch number"),
        ({"payload": object()}, "cannot be written as JSON"),
        ({"score": float("nan")}, "cannot be written as JSON"),
    ],
)
def test_events_that_cannot_be_stored_faithfully_are_refused(
    settings: Settings,
    stream_name: str,
    event: object,
    complaint: str,
) -> None:
    create_stream(settings, stream_name)
    with (
        Publisher(stream_name, settings=settings) as publisher,
        pytest.raises(PublishError, match=complaint),
    ):
        publisher.send(event)  # type: ignore[arg-type]


def test_events_the_bus_refuses_are_raised_to_the_caller_not_logged_and_lost(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    limit = ConfigResource(
        ResourceType.TOPIC,
        stream_name,
        incremental_configs=[ConfigEntry("max.message.bytes", "300", incremental_operation=SET)],
    )
    admin.incremental_alter_configs([limit])[limit].result(timeout=10)

    publisher = Publisher(stream_name, settings=settings)
    publisher.send({"small": 1})
    publisher.flush()  # events batched with the large one would be refused along with it
    publisher.send({"large": os.urandom(1000).hex()})  # random: compression cannot shrink it
    with pytest.raises(PublishError, match="1 events were not stored") as raised:
        publisher.flush()
    assert "too large" in raised.value.message.lower()
    assert publisher.delivered == 1

    with pytest.raises(PublishError, match="refused the event"):
        publisher.send({"huge": "x" * 2_000_000})


def test_publishing_to_a_missing_stream_fails_at_once(settings: Settings) -> None:
    with pytest.raises(StreamNotFoundError):
        Publisher("no.such.stream", settings=settings)


def test_an_event_dated_further_ahead_than_max_future_is_refused_with_the_readers_reason(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    now_ms = int(time.time() * 1000)
    ahead_ms = now_ms + 10 * 60_000
    with Publisher(stream_name, settings=settings) as publisher:
        assert settings.max_future_ms == 300_000
        with pytest.raises(PublishError) as raised:
            publisher.send({"time": ahead_ms})
        # The arrival is the wall clock when sent, a few milliseconds after `now_ms`.
        arrival_ms = ahead_ms - int(raised.value.message.split(" is ")[1].split(" ms ")[0])
        assert 0 <= arrival_ms - now_ms < 5_000
        assert raised.value.message == future_dated_reason(ahead_ms, arrival_ms, 300_000)
        assert "MILLRACE_MAX_FUTURE" in (raised.value.hint or "")
        with pytest.raises(PublishError, match="ahead of its arrival time"):
            publisher.send({"time": "2100-01-01T00:00:00Z"})
        publisher.send({"time": now_ms + 60_000, "n": 1})  # within five minutes: sent
    lenient = dataclasses.replace(settings, events_max_future="1h")
    with Publisher(stream_name, settings=lenient) as publisher:
        publisher.send({"time": ahead_ms, "n": 2})
    # Read as it was published: under the same bound (a reader of 5 minutes drops n=2).
    records = list(tail(stream_name, TailStart(from_beginning=True), settings=lenient))
    assert [record.value["n"] for record in records] == [1, 2]


def test_an_event_nested_too_deeply_is_refused_not_a_recursion_error(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    event: dict = {}
    for _ in range(10_000):
        event = {"a": event}
    with (
        Publisher(stream_name, settings=settings) as publisher,
        pytest.raises(PublishError, match="nested too deeply"),
    ):
        publisher.send(event)


def test_with_tracked_ids_the_error_names_the_events_the_bus_did_not_store(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    limit = ConfigResource(
        ResourceType.TOPIC,
        stream_name,
        incremental_configs=[ConfigEntry("max.message.bytes", "300", incremental_operation=SET)],
    )
    admin.incremental_alter_configs([limit])[limit].result(timeout=10)

    publisher = Publisher(stream_name, settings=settings, track_ids=True)
    publisher.send({"small": 1})
    publisher.flush()
    refused = publisher.send({"large": os.urandom(1000).hex()}, record_id="large-1")
    with pytest.raises(DeliveryError, match="1 events were not stored") as raised:
        publisher.flush()
    assert (refused, raised.value.record_ids, raised.value.count) == ("large-1", ("large-1",), 1)
