"""Spark's write-ahead log read as files: the batches a query's log holds, each batch's
metadata and per-source offsets, each source's starting offsets, and files that are not as
Spark writes them."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from millrace.engine.checkpoint_log import (
    UnreadableLogError,
    batch_ids,
    initial_offsets_file,
    initial_offsets_files,
    kafka_offsets,
    query_folders,
    read_commit,
    read_initial_offsets,
    read_offsets,
    write_initial_offsets,
)

METADATA = {"batchWatermarkMs": 5, "batchTimestampMs": 1_000, "conf": {}}


def _query(app_folder: Path, name: str, batches: int) -> Path:
    folder = app_folder / name
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    for batch in range(batches):
        sources = [{"clicks": {"0": 10 * batch, "1": 3}}, "-"]
        lines = ["v1", json.dumps(METADATA), *(s if s == "-" else json.dumps(s) for s in sources)]
        (folder / "offsets" / str(batch)).write_text("\n".join(lines))
        (folder / "offsets" / f".{batch}.crc").write_text("crc")
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return folder


def test_a_querys_batches_metadata_and_offsets_per_source(tmp_path: Path) -> None:
    query = _query(tmp_path, "table.t", batches=11)
    (tmp_path / "_dead_letters").mkdir()  # a router's folder: no offsets/, so not a query
    assert query_folders(tmp_path) == {"table.t": query}
    assert query_folders(tmp_path / "nothing") == {}
    assert batch_ids(query / "offsets") == list(range(11))  # by number, without the .crc files
    metadata, sources = read_offsets(query / "offsets" / "10")
    assert metadata == METADATA and sources == [{"clicks": {"0": 100, "1": 3}}, None]
    assert kafka_offsets(sources[0]) == {"clicks": {0: 100, 1: 3}}
    assert kafka_offsets(None) == {} and kafka_offsets({"clicks": {"0": "x"}}) == {}
    assert read_commit(query / "commits" / "10") == {"nextBatchWatermarkMs": 0}


@pytest.mark.parametrize(
    ("read", "content", "reason"),
    [
        (read_offsets, b"", "it is empty"),
        (read_offsets, b"\xff\xfe", "it is not text (byte 0 is 0xff)"),
        (read_offsets, b"{}", "its first line is '{}', not Spark's log version (such as v1)"),
        (read_offsets, b"v1", "it ends after its version line: the batch's metadata is missing"),
        (read_offsets, b"v1\n[]", "line 2 is not the batch's metadata (a JSON object)"),
        (read_offsets, b'v1\n{}\n{"clicks"', "line 3 is not an input's offsets as JSON"),
        (read_initial_offsets, b"\0", "it is empty"),
        (read_initial_offsets, b"\0\xff", "it is not text (byte 0 is 0xff)"),
        (read_initial_offsets, b'\0{"clicks":{"0":1}}', "its first line is"),
        (read_initial_offsets, b"\0v1", "it ends after its version line: the offsets are"),
        (read_initial_offsets, b'\0v1\n{"c"', "line 2 is not a source's starting offsets as"),
        (read_initial_offsets, b'\0v1\n{"c":{"0":"x"}}', "line 2 is not offsets per stream"),
    ],
)
def test_a_file_not_as_spark_writes_it_is_named_with_what_is_wrong(
    tmp_path: Path, read: Callable[[Path], object], content: bytes, reason: str
) -> None:
    path = tmp_path / "3"
    path.write_bytes(content)
    with pytest.raises(UnreadableLogError) as raised:
        read(path)
    assert raised.value.path == path and raised.value.reason.startswith(reason)
    assert raised.value.code == "checkpoint-corrupt"
    with pytest.raises(UnreadableLogError, match="cannot be read"):
        read_commit(tmp_path / "missing")


def test_a_sources_starting_offsets_are_read_and_written_as_spark_keeps_them(
    tmp_path: Path,
) -> None:
    written = initial_offsets_file(tmp_path / "table.t", "1")
    write_initial_offsets(written, {"clicks": {1: 12, 0: 10}})
    assert written.read_bytes() == b'\0v1\n{"clicks": {"0": 10, "1": 12}}'
    assert initial_offsets_files(tmp_path / "table.t") == {"1": written}
    assert read_initial_offsets(written) == {"clicks": {0: 10, 1: 12}}
    assert initial_offsets_files(tmp_path / "nothing") == {}
