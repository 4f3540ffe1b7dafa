"""The Python worker's grouping of transformWithStateInPandas rows by slices gives what
PySpark's own row-by-row grouping gives: the same groups, keys, chunks, columns and values."""

import io

import pandas as pd
import pyarrow as pa
import pyspark
import pytest
from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer

from millrace.engine.spark_internals import group_rows_by_slices, pyspark_load_stream


def _arrow_stream(batches: list[pd.DataFrame]) -> bytes:
    tables = [pa.Table.from_pandas(batch, preserve_index=False) for batch in batches]
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, tables[0].schema) as writer:
        for table in tables:
            writer.write_table(table)
    return sink.getvalue()


def _serializer(max_records: int, max_bytes: int) -> TransformWithStateInPandasSerializer:
    serializer = TransformWithStateInPandasSerializer(
        timezone="UTC",
        safecheck=False,
        assign_cols_by_name=True,
        prefer_int_ext_dtype=False,
        arrow_max_records_per_batch=max_records,
        arrow_max_bytes_per_batch=max_bytes,
        int_to_decimal_coercion_enabled=False,
    )
    serializer.key_offsets = [0]
    return serializer


def _items(load_stream, data: bytes, max_records: int, max_bytes: int) -> list:
    """Each item as (mode, key, its rows with their columns and types, its chunks' sizes)."""
    items = []
    for mode, key, chunks in load_stream(_serializer(max_records, max_bytes), io.BytesIO(data)):
        frames = [] if chunks is None else [frame for _, frame in chunks]
        rows = [
            # NaN is not equal to itself: None stands for it.
            (column, str(frame[column].dtype), value if value == value else None)
            for frame in frames
            for row in frame.to_dict("records")
            for column, value in row.items()
        ]
        items.append((mode, key, rows, [len(frame) for frame in frames]))
    return items


BATCHES = [
    pd.DataFrame(
        {
            "group": [0, 0, 0, 1, 1, 3],
            "stream": ["a", "a", "b", "a", None, "c"],
            "value": [b"{}", b'{"n": 1}', b"{}", b"{}", b"{}", b"{}"],
            "time_ms": [1.0, None, 3.0, 4.0, 5.0, 6.0],
        }
    ),
    # The last group of the first batch goes on in the second.
    pd.DataFrame(
        {
            "group": [3, 3, 5, 7, 7, 7, 7, 7],
            "stream": ["c", "c", "a", "a", "a", "b", "b", "b"],
            "value": [b"{}"] * 8,
            "time_ms": [7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0],
        }
    ),
]


@pytest.mark.parametrize(
    ("max_records", "max_bytes"), [(10_000, 2**31 - 1), (2, 2**31 - 1), (10_000, 64)]
)
def test_slices_give_the_groups_rows_and_values_of_pyspark_s_own_grouping_in_capped_chunks(
    max_records: int, max_bytes: int
) -> None:
    data = _arrow_stream(BATCHES)
    group_rows_by_slices()

    sliced = _items(TransformWithStateInPandasSerializer.load_stream, data, max_records, max_bytes)
    own = _items(pyspark_load_stream(), data, max_records, max_bytes)

    assert [item[:3] for item in sliced] == [item[:3] for item in own]
    assert [key for _, key, _, _ in sliced] == [(0,), (1,), (3,), (5,), (7,), None, None]
    largest = max(size for *_, sizes in own for size in sizes)
    assert max(size for *_, sizes in sliced for size in sizes) <= largest
    # A group that goes on in the next Arrow batch comes as one chunk more than PySpark's.
    chunks = sum(len(sizes) for *_, sizes in sliced)
    assert sum(len(sizes) for *_, sizes in own) <= chunks <= sum(len(s) for *_, s in own) + 1


def test_slices_are_taken_only_on_the_pyspark_they_were_written_against() -> None:
    group_rows_by_slices()

    taken = TransformWithStateInPandasSerializer.load_stream is not pyspark_load_stream()
    assert taken == (pyspark.__version__ == "4.2.0")
