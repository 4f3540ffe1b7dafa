"""The bucket runner's input rows: a record goes to its key's bucket with its event time,
whether Spark or Python reads them, and keeps its place (stream, bucket, offset) as integers,
whatever else came in the same Arrow batch, since its dead letter and the ids made of its place
must be those every other reader makes."""

import json
import math
import random
import struct
from datetime import UTC, datetime

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.apps.processors.rows import (
    bucket_of,
    input_rows,
    placed_rows,
    record_of,
    undecodable_letter,
)
from millrace.bus.dead_letters import dead_letter_id
from millrace.processor import Input

T0 = 1_767_225_600_000


def test_a_record_batched_with_a_wake_up_keeps_an_integer_bucket_and_offset() -> None:
    # A wake-up row has no record bucket, offset or time: in the frame Spark hands over,
    # those columns are floats, and the runner drops the wake-up before reading the records.
    frame = pd.DataFrame(
        {
            "stream": ["clicks", "clicks", "_millrace.clock.counter"],
            "value": [b"{oops", b'{"user": "u7"}', None],
            "record_key": [None, "u7", None],
            "record_id": [None, None, None],
            "record_bucket": [0, 0, None],
            "record_offset": [41, 42, None],
            "fault": [None, None, None],
            "time_ms": [None, T0, None],
        }
    )
    bad, good = input_rows(frame[frame["stream"] == "clicks"])

    letter = undecodable_letter("counter", bad, "value is not valid JSON")
    fields = json.loads(letter.value)
    assert (fields["bucket"], fields["offset"]) == (0, 41)
    assert isinstance(fields["bucket"], int) and isinstance(fields["offset"], int)
    assert letter.id == dead_letter_id("clicks", 0, 41) == "dlq:clicks:0:41"
    record = record_of(good)
    assert (record.bucket, record.offset, record.time_ms) == (0, 42, T0)
    assert all(isinstance(n, int) for n in (record.bucket, record.offset, record.time_ms))


def _raw_records(
    spark: SparkSession, values: list[bytes | None], carried_ms: int | None
) -> DataFrame:
    """Kafka records as Spark's Kafka reader gives them, each carrying `carried_ms` if any."""
    headers = [] if carried_ms is None else [("time", str(carried_ms).encode())]
    arrival = datetime.fromtimestamp(T0 / 1000 + 60, UTC)
    rows = [(None, value, 0, offset, arrival, headers) for offset, value in enumerate(values)]
    schema = (
        "key BINARY, value BINARY, partition INT, offset LONG, timestamp TIMESTAMP, "
        "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
    )
    return spark.createDataFrame(rows, schema)


def _placements(raw: DataFrame, source: Input) -> list[tuple[int, int, int | None]]:
    placed = placed_rows(raw, source, 64, 3_600_000).where(F.col("stream") == "clicks")
    rows = placed.select("record_offset", "bucket", "time_ms").orderBy("record_offset").collect()
    return [(row.record_offset, row.bucket, row.time_ms) for row in rows]


def test_a_key_field_places_every_record_in_spark_where_the_python_pass_placed_it(
    spark: SparkSession,
) -> None:
    # An Input's key field is read in the JVM; its key function only in Python, as every
    # Input's was before. Both must give each record the same bucket (a key's state lives in
    # it) and the same event time, whatever JSON the key and time are written as.
    keys = [
        '"u7"',
        '"say \\"hi\\"\\\\ \\n\\t\\u0001\\u007f"',
        '"café 🙂"',
        '"\\ud800"',
        '"\\u00e9"',
        "0",
        "-0",
        "7",
        "-7",
        str(2**63),
        str(10**30),
        "9" * 4300,
        "9" * 4301,
        "1.0",
        "-0.0",
        "1.5",
        "0.1",
        "-2.5e-3",
        str(1 / 3),
        "1e-07",
        "1.5e-05",
        "0.0001",
        "123456789.123",
        "1e16",
        "1e22",
        "1e300",
        "5e-324",
        repr(2.0**-30),
        "1e400",
        "-1e400",
        "NaN",
        "Infinity",
        "true",
        "false",
        "null",
        "[1, 2]",
        '{"a": 1}',
    ]
    randomness = random.Random(46)
    doubles = (struct.unpack("<d", randomness.randbytes(8))[0] for _ in range(2_000))
    keys += [repr(number) for number in doubles if math.isfinite(number)]
    times = [
        "1767225600123",
        "1767225600",
        "1767225600.001",
        '"2026-01-01T00:00:00Z"',
        '"2026-01-01T00:00:00.001Z"',
        '"2026-01-01T00:00:00.123456Z"',
        '"2026-01-01T10:00:00+02:00"',
        '"2026-01-01 00:00:00"',
        '"2026-01-01"',
        "null",
        "true",
        "[1]",
        '{"at": 1}',
        '"not a time"',
        "NaN",
        "1e400",
        "-5",
    ]
    values: list[bytes | None] = [f'{{"k": {key}, "ts": {T0}}}'.encode() for key in keys]
    values += [f'{{"k": "u7", "ts": {time}}}'.encode() for time in times]
    values += [
        b'{"k": "u7"}',
        b'{"k": "first", "ts": 5, "k": "last", "ts": 1767225600000}',
        b'{"k": "u7", "ts": 1767225600000} and more',
        b'{"k": "u7", "ts": 1767225600000, "deep": [[{"n": 1e5}], "x"]}',
        b'{"k": "\xff", "ts": 1767225600000}',
        b'\xef\xbb\xbf{"k": "u7", "ts": 1767225600000}',
        b'["u7", 1767225600000]',
        b"not json",
        b"",
        None,
    ]
    bom = values.index(b'\xef\xbb\xbf{"k": "u7", "ts": 1767225600000}')
    by_field = Input("clicks", key="k", time="ts")
    by_function = Input("clicks", key=lambda record: record["k"], time="ts")
    for carried_ms in (None, T0 + 5):
        raw = _raw_records(spark, values, carried_ms)

        in_spark = _placements(raw, by_field)

        reference = _placements(raw, by_function)
        # Python's json.loads skips a byte-order mark, but the bucket runner's decode does not,
        # so the record is a dead letter either way: read in Spark, it dates no bucket.
        assert in_spark.pop(bom) == (bom, 0, None) != reference.pop(bom)
        assert in_spark == reference
    assert in_spark[0][1] == bucket_of("u7", 64)
    assert in_spark[keys.index("1.0")][1] == in_spark[keys.index("true")][1] == bucket_of(1, 64)
    assert in_spark[len(keys) + times.index("null")][2] == T0 + 5
    assert in_spark[len(keys) + times.index('"not a time"')][2] is None


def test_a_key_of_several_fields_places_every_record_in_spark_where_the_python_pass_placed_it(
    spark: SparkSession,
) -> None:
    # A tuple of key fields is read in the JVM too: the key is the fields' values as a tuple,
    # in the Input's order, whatever order the record writes them in.
    parts = ['"u7"', '"café 🙂"', '"\\ud800"', "-0", "7", str(2**63), "1.0", "1.5", "1e-07"]
    parts += ["1e400", "NaN", "true", "null", "[1]", '{"a": 1}']
    values: list[bytes | None] = [
        f'{{"k": {first}, "ts": {T0}, "j": {second}}}'.encode()
        for first in parts
        for second in parts
    ]
    values += [
        f'{{"j": 7, "k": "u7", "ts": {T0}}}'.encode(),
        f'{{"k": "u7", "ts": {T0}}}'.encode(),
        f'{{"k": "u7", "j": 1, "ts": {T0}, "j": 2}}'.encode(),
        b"not json",
    ]
    raw = _raw_records(spark, values, None)
    pairs = (Input("clicks", key=("k", "j"), time="ts"), lambda record: (record["k"], record["j"]))
    repeated = (Input("clicks", key=("k", "k"), time="ts"), lambda record: (record["k"],) * 2)
    for by_fields, key_function in (pairs, repeated):
        by_function = Input("clicks", key=key_function, time="ts")

        in_spark = _placements(raw, by_fields)

        assert in_spark == _placements(raw, by_function)
    swapped, missing, repeated_field = (len(parts) ** 2 + n for n in range(3))
    in_spark = _placements(raw, pairs[0])
    assert in_spark[swapped][1:] == (bucket_of(("u7", 7), 64), T0)
    assert in_spark[swapped][1] == in_spark[parts.index('"u7"') * len(parts) + parts.index("7")][1]
    assert in_spark[missing][2] is None
    assert in_spark[repeated_field][1] == bucket_of(("u7", 2), 64)
