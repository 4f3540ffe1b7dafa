"""Reading streams by offset for millrace's own components (millrace.bus.internal)."""

from __future__ import annotations

import json
import time

from millrace.bus.internal import StreamWatch
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from tests.plain_producer import plain_producer


def _send(workspace: Workspace, stream: str, times: list[int], bucket: int) -> None:
    producer = plain_producer(workspace.settings)
    for time_ms in times:
        producer.produce(stream, json.dumps({"time": time_ms}), partition=bucket)
    producer.flush()


def test_a_stream_watch_sees_each_new_record_over_the_one_connection(
    workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    _send(workspace, stream_name, [1000, 1001, 1002], bucket=0)
    watch = StreamWatch(workspace.settings, stream_name)
    try:
        assert watch.end_offsets() == {0: 3, 1: 0}
        first = watch.last_records(watch.end_offsets(), count=2)
        assert [value["time"] for value, _, _ in first[0]] == [1002, 1001]
        assert 1 not in first

        # The second look reads the bucket from where it ends now, not where the first stopped.
        _send(workspace, stream_name, [5000], bucket=0)
        _send(workspace, stream_name, [7000], bucket=1)
        assert watch.end_offsets() == {0: 4, 1: 1}
        second = watch.last_records(watch.end_offsets(), count=2)
        assert [value["time"] for value, _, _ in second[0]] == [5000, 1002]
        assert [value["time"] for value, _, _ in second[1]] == [7000]
    finally:
        watch.close()


def test_a_stream_watch_gives_the_event_time_a_record_carries_in_its_time_header(
    workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    producer = plain_producer(workspace.settings)
    producer.produce(stream_name, b'{"n": 1}', partition=0, headers=[("time", b"1767225600000")])
    producer.produce(stream_name, b'{"n": 2}', partition=0)
    producer.flush()
    watch = StreamWatch(workspace.settings, stream_name)
    try:
        found = watch.last_records(watch.end_offsets())
        assert [(value["n"], carried) for value, _, carried in found[0]] == [
            (2, None),
            (1, 1_767_225_600_000),
        ]
    finally:
        watch.close()


def test_a_stream_watch_tells_when_the_bus_stored_the_record_at_an_offset(
    workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    stored: dict[tuple[int, int], int] = {}

    def delivered(error, message) -> None:
        stored[(message.partition(), message.offset())] = message.timestamp()[1]

    producer = plain_producer(workspace.settings)
    for bucket in (0, 1, 0):
        producer.produce(stream_name, b'{"n": 1}', partition=bucket, on_delivery=delivered)
        producer.flush()
        time.sleep(0.05)
    watch = StreamWatch(workspace.settings, stream_name)
    try:
        assert watch.append_times_at({0: 1, 1: 0}) == {0: stored[(0, 1)], 1: stored[(1, 0)]}
        assert stored[(0, 1)] > stored[(1, 0)]
        # Again over the same connection, from an earlier offset; one past the end is left out.
        assert watch.append_times_at({0: 0, 1: 1}) == {0: stored[(0, 0)]}
    finally:
        watch.close()
