import dataclasses
import json

from millrace.bus.publisher import Publisher
from millrace.bus.reader import Reader, TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.settings import Settings
from millrace.records import before_1970_reason
from tests.plain_producer import plain_producer


def _publish_numbers(settings: Settings, stream: str, count: int) -> dict[str, int]:
    with Publisher(stream, settings=settings) as publisher:
        return {publisher.send({"n": number}, key=str(number)): number for number in range(count)}


def test_a_restarted_reader_loses_nothing_and_repeats_only_since_its_last_checkpoint(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name, buckets=3)
    ids = _publish_numbers(settings, stream_name, 100)

    first_run = []
    crashed = Reader(stream_name, "counter", settings=settings, checkpoint_every=10)
    for record in crashed:
        first_run.append(record.id)
        if len(first_run) == 35:
            break
    crashed.close(checkpoint=False)  # as if the script died while handling record 35
    assert crashed.checkpoints == 3

    with Reader(stream_name, "counter", settings=settings, follow=False) as restarted:
        second_run = [record.id for record in restarted]

    assert set(first_run) | set(second_run) == set(ids)
    repeated = len(first_run) + len(second_run) - len(ids)
    assert repeated == 5  # records 31 to 35 were handled after the third checkpoint

    with Reader(stream_name, "counter", settings=settings, follow=False) as after_clean_close:
        assert list(after_clean_close) == []


def test_a_reader_checkpoints_by_bytes_as_well_as_by_count(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name)
    with Publisher(stream_name, settings=settings) as publisher:
        for number in range(20):
            publisher.send({"n": f"{number:03d}"})  # 11 bytes each: {"n":"007"}
    reader = Reader(
        stream_name,
        "bytes",
        settings=settings,
        checkpoint_every=1000,
        checkpoint_bytes=30,
        follow=False,
    )
    assert len(list(reader)) == 20
    assert reader.checkpoints == 6  # after every third record: 33 bytes
    reader.close()
    assert reader.checkpoints == 7  # the last two records


def test_undecodable_records_go_to_the_dead_letter_stream_and_are_counted(
    settings: Settings,
    stream_name: str,
) -> None:
    create_stream(settings, stream_name)
    producer = plain_producer(settings)
    for raw in (b'{"n": 1}', b"{broken", b'"just a string"', b'{"n": 2}', b"\xff\xfe"):
        producer.produce(stream_name, raw, key=b"k")
    producer.flush()

    with Reader(stream_name, "dlq", settings=settings, follow=False) as reader:
        good = [record.value["n"] for record in reader]
    assert good == [1, 2]
    assert reader.dead_letter_count == 3

    letters = list(
        tail(dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=settings)
    )
    assert [(letter.value["offset"], letter.value["stream"]) for letter in letters] == [
        (1, stream_name),
        (2, stream_name),
        (4, stream_name),
    ]
    assert letters[0].value["original"] == "{broken"
    assert "not valid JSON" in letters[0].value["error"]
    assert "not an object" in letters[1].value["error"]
    assert letters[2].value["original_base64"] == "//4="
    assert letters[2].value["error"] == "value is not valid UTF-8"
    assert letters[0].id == f"dlq:{stream_name}:0:1"


def test_an_empty_id_header_is_no_id(settings: Settings, stream_name: str) -> None:
    create_stream(settings, stream_name)
    producer = plain_producer(settings)
    for n in (1, 2):
        producer.produce(stream_name, b'{"n": %d}' % n, headers=[("id", b"")])
    producer.flush()

    records = list(tail(stream_name, TailStart(from_beginning=True), settings=settings))

    assert [(record.value["n"], record.id) for record in records] == [(1, None), (2, None)]


def test_a_record_is_dated_by_its_time_field_else_its_time_header_else_its_arrival(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    producer = plain_producer(settings)
    carried = [("time", b"1767225600000")]  # 2026-01-01T00:00:00Z, as millrace's writers carry it
    producer.produce(stream_name, b'{"n": 1, "time": "2026-01-01T00:05:00Z"}', headers=carried)
    producer.produce(stream_name, b'{"n": 2}', headers=carried)
    producer.produce(stream_name, b'{"n": 3}')
    producer.flush()

    with Reader(stream_name, "dating", settings=settings, follow=False) as reader:
        records = list(reader)
    tailed = list(tail(stream_name, TailStart(from_beginning=True), settings=settings))

    for found in (records, tailed):
        by_n = {record.value["n"]: record.time_ms for record in found}
        assert by_n[1] == 1_767_225_900_000  # the field wins over the header
        assert by_n[2] == 1_767_225_600_000
        assert by_n[3] > 1_767_225_900_000  # its arrival, today


def test_published_events_carry_their_time_for_readers_of_another_time_field(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    with Publisher(stream_name, settings=settings) as publisher:
        publisher.send({"time": "2026-01-01T00:00:00Z", "n": 1})

    other_field = dataclasses.replace(settings, events_time_field="ts")
    with Reader(stream_name, "other-field", settings=other_field, follow=False) as reader:
        assert [record.time_ms for record in reader] == [1_767_225_600_000]


def test_a_reader_dead_letters_a_record_dated_before_1970_or_too_far_ahead_as_spark_readers_do(
    settings: Settings, stream_name: str
) -> None:
    create_stream(settings, stream_name)
    producer = plain_producer(settings)
    for time in ("2026-01-01T00:00:00Z", "1969-07-20T20:17:40Z", "2100-01-01T00:00:00Z"):
        producer.produce(stream_name, json.dumps({"time": time}).encode())
    producer.flush()

    with Reader(stream_name, "bounds", settings=settings, follow=False) as reader:
        kept = [record.value["time"] for record in reader]
    tailed = [
        record.value["time"]
        for record in tail(stream_name, TailStart(from_beginning=True), settings=settings)
    ]

    assert kept == tailed == ["2026-01-01T00:00:00Z"]
    assert reader.dead_letter_count == 2
    letters = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=settings
    )
    errors = {letter.value["offset"]: letter.value["error"] for letter in letters}
    assert errors[1] == before_1970_reason(-14_182_940_000)
    assert errors[2].startswith("event time 2100-01-01T00:00:00.000Z is ")
    assert errors[2].endswith(f"more than max_future ({settings.max_future_ms} ms)")
