import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream, dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.engine.streams import read_batch, read_stream
from millrace.engine.writes import write_batch, write_stream
from millrace.errors import SchemaError, StreamNotFoundError
from tests.plain_producer import plain_producer

SCHEMA = "event STRING, category STRING, score DOUBLE"
START = datetime(2026, 1, 1, tzinfo=UTC)


def _collect(records: DataFrame, workspace: Workspace, app: str) -> tuple[list, StreamingQuery]:
    rows: list = []
    query = (
        records.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
        .option("checkpointLocation", str(workspace.checkpoint(app, "collect")))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return rows, query


def test_ten_thousand_published_events_are_read_by_spark_exactly_once_with_their_times(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
    tmp_path: Path,
) -> None:
    create_stream(workspace.settings, stream_name, buckets=4)
    times = {n: START + timedelta(milliseconds=7 * n) for n in range(10_000)}
    lines = [
        json.dumps(
            {"time": times[n].isoformat(), "event": f"e{n}", "category": "c", "score": n / 10}
        )
        for n in range(10_000)
    ]
    malformed = [f'{{"event": "cut short {n}"' for n in range(10)]
    misfits = [
        json.dumps({"time": START.isoformat(), "event": f"bad{n}", "score": "high"})
        for n in range(10)
    ]
    malformed_lines = set()
    for n, line in enumerate(malformed):  # spread the malformed lines through the file
        position = 1000 * n + 17
        lines.insert(position, line)
        malformed_lines.add(position + 1)
    lines += misfits
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(lines) + "\n")

    published = subprocess.run(
        [
            sys.executable,
            "-m",
            "millrace.cli.main",
            "publish",
            stream_name,
            str(source),
            "--key",
            "event",
        ],
        capture_output=True,
        text=True,
        env=os.environ,
        check=False,
    )
    assert published.returncode == 1
    reported = {
        int(line.split(":")[0].removeprefix("line "))
        for line in published.stderr.splitlines()
        if line.startswith("line ")
    }
    assert reported == malformed_lines
    assert "published 10010 events" in published.stdout
    assert "10 lines failed" in published.stdout

    source_records = read_stream(spark, workspace, "exactly-once", stream_name, SCHEMA, time="time")
    rows, query = _collect(source_records.records, workspace, "exactly-once")
    source_records.wait_for_dead_letters(query)

    published_ids = {
        record.id
        for record in tail(stream_name, TailStart(from_beginning=True), settings=workspace.settings)
    }
    assert len(rows) == 10_000
    assert len({row.record_id for row in rows}) == 10_000
    assert {row.record_id for row in rows} <= published_ids
    # PySpark hands timestamps back as naive local datetimes: compare instants, not fields.
    assert {int(row.event[1:]): row.time.timestamp() for row in rows} == {
        n: moment.timestamp() for n, moment in times.items()
    }
    assert {row.record_bucket for row in rows} == {0, 1, 2, 3}

    letters = list(
        tail(
            dead_letter_stream(stream_name),
            TailStart(from_beginning=True),
            settings=workspace.settings,
        )
    )
    assert len(letters) == 10
    assert {json.loads(letter.value["original"])["event"] for letter in letters} == {
        f"bad{n}" for n in range(10)
    }
    assert all(
        letter.value["error"] == "value does not fit the schema: field 'score' "
        "should be DOUBLE but holds high"
        for letter in letters
    )
    assert source_records.dead_letter_count == 10


def test_written_records_keep_their_ids_and_may_name_their_stream_per_row(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
) -> None:
    settings = workspace.settings
    for name in (stream_name, f"{stream_name}.sports", f"{stream_name}.music"):
        create_stream(settings, name, buckets=2)
    subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", "publish", stream_name, "-"],
        input="\n".join(
            json.dumps(
                {
                    "time": 1_767_225_600_000 + n,
                    "event": f"e{n}",
                    "category": ("sports", "music")[n % 2],
                    "score": n,
                }
            )
            for n in range(20)
        ),
        text=True,
        env=os.environ,
        check=True,
        capture_output=True,
    )

    source = read_stream(spark, workspace, "router", stream_name, SCHEMA, time="time")
    query = write_stream(
        source.records,
        workspace,
        "router",
        "by-category",
        F.concat(F.lit(f"{stream_name}."), F.col("category")),
        key="event",
        available_now=True,
    )
    query.awaitTermination()
    assert source.wait_for_dead_letters(query) == 0

    originals = {
        record.id: record
        for record in tail(stream_name, TailStart(from_beginning=True), settings=settings)
    }
    for category in ("sports", "music"):
        routed = list(
            tail(f"{stream_name}.{category}", TailStart(from_beginning=True), settings=settings)
        )
        assert len(routed) == 10
        for record in routed:
            original = originals[record.id]
            assert record.value["category"] == category
            assert record.key == original.value["event"]
            assert record.time_ms == original.time_ms
            assert set(record.value) == {"event", "category", "score", "time"}


def test_records_without_a_key_are_spread_over_the_buckets_in_step_and_keyed_ones_by_key(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name, buckets=3)
    # One task writes them in order; every fifth record has a key.
    numbers = F.col("id")
    keyed = numbers % 5 == 0
    records = spark.range(0, 3000, 1, numPartitions=1).select(
        numbers.alias("n"),
        F.when(keyed, F.concat(F.lit("k"), (numbers % 4).cast("string"))).alias("record_key"),
        F.concat(F.lit("r"), numbers.cast("string")).alias("record_id"),
    )
    write_batch(records, workspace, stream_name, key=F.col("record_key"))

    unkeyed: dict[int, list[int]] = {0: [], 1: [], 2: []}
    buckets_of_key: dict[str, set[int]] = {}
    for record in tail(stream_name, TailStart(from_beginning=True), settings=workspace.settings):
        if record.key is None:
            unkeyed[record.bucket].append(record.value["n"])
        else:
            buckets_of_key.setdefault(record.key, set()).add(record.bucket)
    # Every bucket holds its records in the order they were written, and at every point of
    # that order each bucket has about a third of the records so far: a reader taking as many
    # from each bucket reads about the same stretch of the stream from each.
    assert all(numbers == sorted(numbers) for numbers in unkeyed.values())
    bucket_of = {n: bucket for bucket, numbers in unkeyed.items() for n in numbers}
    written = [n for n in range(3000) if n % 5 != 0]
    assert sorted(bucket_of) == written
    so_far = [0, 0, 0]
    for count, n in enumerate(written, start=1):
        so_far[bucket_of[n]] += 1
        assert all(abs(share - count / 3) <= 60 for share in so_far)
    assert {key: len(buckets) for key, buckets in buckets_of_key.items()} == {
        "k0": 1,
        "k1": 1,
        "k2": 1,
        "k3": 1,
    }


def test_the_watermark_follows_the_largest_event_time_minus_the_lateness(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name)
    source = read_stream(
        spark, workspace, "watermark", stream_name, SCHEMA, time="time", lateness="30 seconds"
    )
    query = (
        source.records.writeStream.format("noop")
        .option("checkpointLocation", str(workspace.checkpoint("watermark", "noop")))
        .start()
    )
    try:
        for event_time in ("2026-01-01T00:01:00Z", "2026-01-01T00:00:50Z"):
            subprocess.run(
                [sys.executable, "-m", "millrace.cli.main", "publish", stream_name, "-"],
                input=json.dumps({"time": event_time, "event": "e"}),
                text=True,
                env=os.environ,
                check=True,
                capture_output=True,
            )
            query.processAllAvailable()
        # A batch runs with the watermark that the batches before it set.
        assert query.lastProgress["eventTime"]["watermark"] == "2026-01-01T00:00:30.000Z"
    finally:
        query.stop()


def test_a_batch_read_keeps_the_records_of_its_time_range_and_routes_every_bad_one(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name, buckets=2)
    start_ms = int(START.timestamp() * 1000)
    ids = {}
    with Publisher(stream_name, settings=workspace.settings) as publisher:
        for minute in range(10):
            event = {"time": start_ms + minute * 60_000, "event": f"e{minute}", "score": minute}
            ids[f"e{minute}"] = publisher.send(event)
        # Outside the range, but a bad record cannot be placed in one: it is routed anyway.
        publisher.send({"time": start_ms, "event": "bad", "score": "high"})

    source = read_batch(
        spark,
        workspace,
        stream_name,
        SCHEMA,
        time="time",
        start_ms=start_ms + 3 * 60_000,
        end_ms=start_ms + 7 * 60_000,
    )

    assert not source.records.isStreaming
    streaming = read_stream(
        spark, workspace, "batch", stream_name, SCHEMA, time="time", route_dead_letters=False
    )
    assert source.records.schema == streaming.records.schema
    rows = source.records.collect()
    assert {row.event: row.record_id for row in rows} == {
        f"e{minute}": ids[f"e{minute}"] for minute in (3, 4, 5, 6)
    }
    assert {row.event: row.time.timestamp() for row in rows} == {
        f"e{minute}": START.timestamp() + minute * 60 for minute in (3, 4, 5, 6)
    }
    [letter] = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=workspace.settings
    )
    assert letter.value["error"] == (
        "value does not fit the schema: field 'score' should be DOUBLE but holds high"
    )
    assert letter.id == f"dlq:{stream_name}:{letter.value['bucket']}:{letter.value['offset']}"
    assert source.dead_letter_count == 1


@pytest.mark.parametrize(
    ("schema", "time", "complaint"),
    [
        ("event STRING, record_id STRING", "time", "reserved for the record's metadata"),
        ("event STRNG", "time", "is not valid"),
        ("INT", "time", "is a type, not a list of fields"),
        ("event STRING, time STRING", "time", "time column 'time' is declared STRING"),
        ("`odd name` STRING", "time", "is not a plain name"),
    ],
)
def test_bad_schemas_are_refused_with_what_to_change(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
    schema: str,
    time: str,
    complaint: str,
) -> None:
    create_stream(workspace.settings, stream_name)
    with pytest.raises(SchemaError, match=complaint):
        read_stream(spark, workspace, "schemas", stream_name, schema, time=time)


def test_reading_or_writing_a_missing_stream_fails_before_any_query_starts(
    spark: SparkSession,
    workspace: Workspace,
) -> None:
    with pytest.raises(StreamNotFoundError):
        read_stream(spark, workspace, "missing", "no.such.stream", SCHEMA, time="time")
    with pytest.raises(StreamNotFoundError):
        read_batch(spark, workspace, "no.such.stream", SCHEMA, time="time", start_ms=0, end_ms=1)
    with pytest.raises(StreamNotFoundError):
        write_stream(spark.range(1).toDF("n"), workspace, "missing", "out", "no.such.stream")


def test_each_kind_of_bad_record_gets_its_reason_and_fields_left_out_are_fine(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    records = [
        (b'{"time": 1767225600000, "event": "full", "category": "c", "score": 1.5}', None),
        (b'{"time": 1767225600000, "event": "no category", "score": 2}', None),
        (b'{"time": 1767225600000, "event": "null score", "category": "c", "score": null}', None),
        (b"{broken", "value is not valid JSON"),
        (b"[1, 2]", "value is JSON but not an object"),
        (
            b'{"time": 1767225600000, "event": "e", "score": "high"}',
            "value does not fit the schema: field 'score' should be DOUBLE but holds high",
        ),
        (
            b'{"time": "last tuesday", "event": "e"}',
            "time field 'time' holds last tuesday, which is neither an ISO-8601 time nor an "
            "epoch number",
        ),
        (b'{"time": "NaN", "event": "e"}', "time field 'time' holds NaN, which is neither"),
        # Too large for a TIMESTAMP: a dead letter, not an overflow that stops the query.
        (b'{"time": 1e17, "event": "e"}', "time field 'time' holds 1.0E17, which is neither"),
        (
            b'{"time": 9223372036854775807, "event": "e"}',
            "time field 'time' holds 9223372036854775807, which is neither",
        ),
        (None, "value is empty"),
        (b"", "value is not valid JSON"),
        # A field given twice: Spark's JSON reader takes it for invalid JSON.
        (
            b'{"time": 1767225600000, "event": "e", "score": 1, "score": "high"}',
            "value is not valid JSON",
        ),
    ]
    producer = plain_producer(workspace.settings)
    for value, _ in records:
        producer.produce(stream_name, value)
    producer.flush()

    source = read_stream(spark, workspace, "reasons", stream_name, SCHEMA, time="time")
    rows, query = _collect(source.records, workspace, "reasons")

    assert source.wait_for_dead_letters(query) == 10
    assert {row.event: (row.category, row.score) for row in rows} == {
        "full": ("c", 1.5),
        "no category": (None, 2.0),
        "null score": ("c", None),
    }
    letters = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=workspace.settings
    )
    reasons = {letter.value["offset"]: letter.value["error"] for letter in letters}
    assert set(reasons) == set(range(3, 13))
    for offset, (_, reason) in enumerate(records):
        if reason is not None:
            assert reasons[offset].startswith(reason)


def test_an_event_time_is_read_from_epoch_milliseconds_seconds_iso_text_or_the_arrival(
    spark: SparkSession,
    workspace: Workspace,
    stream_name: str,
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    start_ms = int(START.timestamp() * 1000)
    records = {
        "milliseconds": {"time": start_ms + 1},
        "seconds": {"time": start_ms // 1000 + 2},
        "fractional seconds": {"time": start_ms / 1000 + 3.5},
        "milliseconds as text": {"time": str(start_ms + 4)},
        "ISO-8601": {"time": "2026-01-01T00:00:05.000Z"},
        "no time": {},
        "null time": {"time": None},
    }
    # A time given as text is read the same when the text is spaced otherwise than
    # json.dumps spaces it (Spark's numeric parse of the time then fails, and the text is
    # parsed again).
    spaced_otherwise = {
        "ISO-8601 spaced otherwise": '"time" :"2026-01-01T00:00:06.000Z"',
        "milliseconds as text spaced otherwise": f'"time"\t: "{start_ms + 7}"',
    }
    producer = plain_producer(workspace.settings)
    sent_ms = int(datetime.now(UTC).timestamp() * 1000)
    for event, fields in records.items():
        producer.produce(stream_name, json.dumps({"event": event, **fields}))
    for event, time_text in spaced_otherwise.items():
        producer.produce(stream_name, f'{{"event": "{event}", {time_text}}}')
    producer.flush()
    # Streams keep the broker's arrival time: the record's time when it has none.
    arrival_ms = int(datetime.now(UTC).timestamp() * 1000)

    source = read_stream(spark, workspace, "times", stream_name, SCHEMA, time="time")
    rows, query = _collect(source.records, workspace, "times")

    assert source.wait_for_dead_letters(query) == 0
    times = {row.event: round(row.time.timestamp() * 1000) for row in rows}
    arrivals = [times.pop("no time"), times.pop("null time")]
    assert all(sent_ms <= time_ms <= arrival_ms for time_ms in arrivals)
    assert times == {
        "milliseconds": start_ms + 1,
        "seconds": start_ms + 2_000,
        "fractional seconds": start_ms + 3_500,
        "milliseconds as text": start_ms + 4,
        "ISO-8601": start_ms + 5_000,
        "ISO-8601 spaced otherwise": start_ms + 6_000,
        "milliseconds as text spaced otherwise": start_ms + 7,
    }


def test_a_value_that_is_not_utf8_is_a_dead_letter_and_an_empty_id_header_is_no_id(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name)
    start_ms = int(START.timestamp() * 1000)
    producer = plain_producer(workspace.settings)
    producer.produce(stream_name, b'{"time": %d, "event": "caf\xe9"}' % start_ms)
    producer.produce(
        stream_name, b'{"time": %d, "event": "no id"}' % start_ms, headers=[("id", b"")]
    )
    producer.flush()

    source = read_batch(
        spark, workspace, stream_name, SCHEMA, time="time", start_ms=start_ms, end_ms=start_ms + 1
    )

    [row] = source.records.collect()
    assert (row.event, row.record_id) == ("no id", f"{stream_name}:0:1")
    [letter] = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=workspace.settings
    )
    assert (letter.value["error"], letter.value["offset"]) == ("value is not valid UTF-8", 0)


def test_a_value_is_utf8_by_the_same_rule_as_python_and_spark_whatever_its_length(
    spark: SparkSession,
) -> None:
    # ASCII of every length around the eight bytes checked at a time, and bytes that are
    # not UTF-8 (a Latin-1 byte, a sequence cut short, an overlong form, a surrogate) at the
    # start, inside an eight-byte word, and in the tail after the last whole word.
    values = [b"x" * length for length in range(18)]
    for bad in (b"\xe9", b"\xe2\x82", b"\xc0\x80", b"\xed\xa0\x80"):
        values += [bad + b"x" * 9, b"x" * 3 + bad + b"x" * 9, b"x" * 16 + bad]
    values += ["café 🙂 €".encode(), "€".encode() * 5, b"{}\x00"]
    frame = spark.createDataFrame([(value,) for value in values], "value BINARY")

    checked = frame.select(
        F.call_function("millrace_is_utf8", F.col("value")).alias("millrace"),
        F.expr("is_valid_utf8(cast(value AS STRING))").alias("spark"),
    ).collect()

    def python_utf8(value: bytes) -> bool:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    assert [row.millrace for row in checked] == [python_utf8(value) for value in values]
    assert [row.millrace for row in checked] == [row.spark for row in checked]


def test_a_value_parsed_in_the_jvm_means_what_spark_from_json_of_its_text_means(
    spark: SparkSession,
) -> None:
    # Every shape of value a stream may hold, each time written as a number, as text, spaced,
    # missing or of another JSON type; values that are not objects, or do not fit the fields
    # (Spark's partial results), and first bytes that would make Jackson take another encoding.
    fields = "event STRING, score DOUBLE, tags ARRAY<STRING>, place STRUCT<x: INT>"
    values = [
        b'{"time": 1767225600000, "event": "a", "score": 1.5, "tags": ["x"], "place": {"x": 1}}',
        b'{"time":"2026-01-01T00:00:00Z","event":"b"}',
        b'{"time": "2026-01-01T00:00:00Z", "event": "c"}',
        b'{"time" :\t"2026-01-01", "event": "d"}',
        b'{"event": "no time"}',
        b'{"time": "1767225600"}',
        b'{"time": 1.5e12, "score": 2}',
        b'{"time": NaN}',
        b'{"time": {"at": 1}}',
        b'{"time": [1, 2]}',
        b'{"time": null, "event": null}',
        b'{"time": true}',
        b'{"score": "high", "time": 5, "event": "partial"}',
        b'{"score": "high", "time": "2026-01-01", "event": "partial text"}',
        b'{"place": {"x": "one"}, "time": 5}',
        b'{"event": 12, "time": 5}',
        b'{"event": {"nested": [1, 2.50]}, "time": 5}',
        b'{"event": "x", "event": "y", "time": 5}',
        b'{"event": "said \\"time\\":\\"x\\"", "time": 5}',
        b'{"event": "trailing"} and more',
        b'{"event": "cut',
        b"[1, 2]",
        b'"text"',
        b"42",
        b"not json",
        b"",
        b"   ",
        '{"event": "café 🙂", "time": 5}'.encode(),
        b'\xef\xbb\xbf{"event": "byte-order mark"}',
        '{"event": "utf-16"}'.encode("utf-16-le"),
        b'{\x00"event": "nul"}',
        None,
    ]
    frame = spark.createDataFrame([(value,) for value in values], "value BINARY")
    schema = StructType.fromDDL(fields)

    def from_json(time_type: str) -> Column:
        return F.from_json(
            F.col("value").cast("string"),
            f"{fields}, time {time_type}, _corrupt STRING",
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"},
        )

    fast, slow = from_json("DOUBLE"), from_json("STRING")
    text = F.col("value").cast("string")
    as_text = F.contains(text, F.lit('"time":"')) | F.contains(text, F.lit('"time": "'))
    spark_parse = frame.select(
        "value", F.when(~as_text, fast).alias("fast"), F.lit(None).alias("slow")
    ).withColumn("slow", F.when(F.col("fast").isNull() | F.col("fast._corrupt").isNotNull(), slow))
    spark_rows = spark_parse.select(
        *[
            F.when(F.col("slow").isNotNull(), F.col(f"slow.{name}"))
            .otherwise(F.col(f"fast.{name}"))
            .alias(name)
            for name in schema.fieldNames()
        ],
        F.col("slow.time").alias("time_text"),
        F.when(F.col("slow").isNotNull(), F.col("slow.time").try_cast("double"))
        .otherwise(F.col("fast.time"))
        .alias("time_number"),
        (
            (F.col("slow").isNull() & F.col("fast").isNull()) | F.col("slow._corrupt").isNotNull()
        ).alias("unparsed"),
    ).collect()
    parsed = F.call_function(
        "millrace_parse_value", F.col("value"), F.lit(schema.json()), F.lit("time")
    )
    jvm_rows = (
        frame.select(parsed.alias("parsed"))
        .select(
            *[F.col(f"parsed.{name}").alias(name) for name in schema.fieldNames()],
            F.col("parsed._millrace_time_text").alias("time_text"),
            F.coalesce(
                F.col("parsed._millrace_time_number"),
                F.col("parsed._millrace_time_text").try_cast("double"),
            ).alias("time_number"),
            (F.col("parsed").isNull() | F.col("parsed._millrace_corrupt")).alias("unparsed"),
        )
        .collect()
    )

    def comparable(row: Row) -> dict[str, str]:
        # A STRING given another JSON value holds its text: the bytes' own in the JVM parse
        # (`{"at": 1}`), Spark's re-written one from text (`{"at":1}`), so the JSON value
        # they hold is compared. NaN is not equal to itself: values are compared as text.
        def meaning(value: object) -> str:
            try:
                return repr(json.loads(value)) if isinstance(value, str) else str(value)
            except ValueError:
                return value

        return {key: meaning(value) for key, value in row.asDict(recursive=True).items()}

    assert [comparable(row) for row in jvm_rows] == [comparable(row) for row in spark_rows]
    assert [row.unparsed for row in jvm_rows][:4] == [False] * 4


def test_a_value_that_is_not_utf8_is_unparsed_whichever_way_its_bytes_are_read(
    spark: SparkSession,
) -> None:
    # Spark's text reads such bytes as U+FFFD and may parse the value; the JVM parse reads
    # the bytes and may not. Either way the record is a dead letter: it is not UTF-8.
    values = [b'{"event": "caf\xe9", "time": 5}', b'{"event": "\xed\xa0\x80", "time": 5}']
    frame = spark.createDataFrame([(value,) for value in values], "value BINARY")
    schema = StructType.fromDDL("event STRING")
    rows = frame.select(
        F.call_function("millrace_is_utf8", F.col("value")).alias("utf8"),
        F.call_function(
            "millrace_parse_value", F.col("value"), F.lit(schema.json()), F.lit("time")
        ).alias("parsed"),
    ).collect()

    assert [row.utf8 for row in rows] == [False, False]


def test_a_record_dated_before_1970_is_a_dead_letter_not_a_late_record_in_every_read(
    spark: SparkSession, workspace: Workspace, stream_name: str
) -> None:
    create_stream(workspace.settings, stream_name, buckets=1)
    start_ms = int(START.timestamp() * 1000)
    producer = plain_producer(workspace.settings)
    for time in (start_ms, -1, "1969-07-20T20:17:40Z"):
        producer.produce(stream_name, json.dumps({"time": time, "event": str(time)}))
    producer.flush()

    source = read_stream(spark, workspace, "old", stream_name, SCHEMA, time="time", lateness="1m")
    rows, query = _collect(source.records, workspace, "old")
    batch = read_batch(
        spark, workspace, stream_name, SCHEMA, time="time", start_ms=-(10**12), end_ms=start_ms + 1
    )

    assert [row.event for row in rows] == [str(start_ms)]
    assert (source.wait_for_dead_letters(query), batch.wait_for_dead_letters()) == (2, 2)
    assert [row.event for row in batch.records.collect()] == [str(start_ms)]
    letters = tail(
        dead_letter_stream(stream_name), TailStart(from_beginning=True), settings=workspace.settings
    )
    assert {(letter.value["offset"], letter.value["error"]) for letter in letters} == {
        (
            1,
            "event time 1969-12-31T23:59:59.000Z is before 1970-01-01, which Spark cannot place "
            "in event time",
        ),
        (
            2,
            "event time 1969-07-20T20:17:40.000Z is before 1970-01-01, which Spark cannot place "
            "in event time",
        ),
    }
