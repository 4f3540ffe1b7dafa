"""The bucket runner's input rows: a record keeps its place (stream, bucket, offset) as
integers, whatever else came in the same Arrow batch, since its dead letter and the ids made
of its place must be those every other reader makes."""

import json

import pandas as pd

from millrace.apps.processors.rows import input_rows, record_of, undecodable_letter
from millrace.bus.dead_letters import dead_letter_id

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
