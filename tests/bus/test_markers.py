"""Watermark markers are no records (millrace.bus.markers): the Python readers skip them,
route none of them as dead letters, and the idle ticker's look at a stream tells the buckets
an app writes."""

from millrace.bus.internal import StreamWatch
from millrace.bus.markers import MarkerWriter
from millrace.bus.publisher import Publisher
from millrace.bus.reader import Reader, TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings


def test_tail_and_a_reader_skip_the_markers_and_route_none_of_them(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name, buckets=2)
    with Publisher(stream_name, settings=settings) as publisher:
        for number in range(4):
            publisher.send({"n": number})
    writer = MarkerWriter(settings, "upstream")
    assert writer.write(stream_name, 2, 1_767_225_600_000)
    writer.close()

    shown = list(tail(stream_name, TailStart(from_beginning=True), settings=settings))
    with Reader(stream_name, "markers", settings=settings, follow=False) as reader:
        read = list(reader)

    assert sorted(record.value["n"] for record in shown) == [0, 1, 2, 3]
    assert sorted(record.value["n"] for record in read) == [0, 1, 2, 3]
    assert reader.dead_letter_count == 0


def test_the_last_records_of_a_bucket_an_app_writes_say_so(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name, buckets=2)
    with Publisher(stream_name, settings=settings) as publisher:
        publisher.send({"n": 1}, key="k")
    writer = MarkerWriter(settings, "upstream")
    assert writer.write(stream_name, 2, 1_767_225_600_000)
    writer.close()
    watch = StreamWatch(settings, stream_name)
    try:
        lasts = watch.last_records(watch.end_offsets())
    finally:
        watch.close()

    assert all(found[0].value is None for found in lasts.values()), "newest is the marker"
    assert any(last.value == {"n": 1} for found in lasts.values() for last in found), (
        "the record before it is still there"
    )
