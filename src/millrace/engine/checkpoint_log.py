"""Spark's write-ahead log in a query's checkpoint, read as files, without Spark.

Every streaming query keeps a checkpoint folder whose log is two folders of files named by
batch id: `offsets/N`, written before batch N runs, and `commits/N`, written once its output
is committed; beside them, each Kafka source keeps the offsets it started from in
`sources/<i>/0`. An `offsets/N` file is the log's version (`v1`), the batch's metadata as a
JSON object (its watermark, start time and conf), then one line per source: its end offsets
as JSON (for Kafka, `{"stream": {"bucket": offset}}`), or `-` for a source without any yet.
A `commits/N` file is the version, then the commit's metadata. The operator's view
(`millrace.ops.checkpoints`), the monitor, the dead-letter routers and the state store's
choice all read the log here, and a Kafka source's offsets JSON, in the log or in a query's
progress, is parsed and counted here too (`kafka_offsets`, `stream_offsets`,
`records_waiting`); a file that is not as Spark writes it is an `UnreadableLogError` naming
it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from millrace.bus.internal import is_internal_stream
from millrace.config.storage import StoragePath, listing
from millrace.errors import CheckpointCorruptError
from millrace.records import JsonObject

Offsets = dict[int, int]
"""The offset of each bucket of one stream."""

_VERSION_LINE = re.compile(r"^v\d+$")


class UnreadableLogError(CheckpointCorruptError):
    """A log file that is not as Spark writes it: `path`, and what is wrong with it (`reason`).

    Example:
        >>> str(UnreadableLogError(Path("offsets/3"), "it is empty"))
        'offsets/3: it is empty'
    """

    def __init__(self, path: StoragePath, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def offsets_log(checkpoint: StoragePath) -> StoragePath:
    """The folder of a query's `offsets/N` files, under its checkpoint folder."""
    return checkpoint / "offsets"


def commits_log(checkpoint: StoragePath) -> StoragePath:
    """The folder of a query's `commits/N` files, under its checkpoint folder."""
    return checkpoint / "commits"


def query_folders(app_folder: StoragePath) -> dict[str, StoragePath]:
    """The checkpoint folder of each query under `app_folder`, by query name, sorted.

    A query's folder holds `offsets/`; the dead-letter routers' folders next to it do not.

    Example:
        >>> for folder in ("table.top_events_5min/offsets", "_dead_letters.clicks"):
        ...     (tmp_path / "top_events" / folder).mkdir(parents=True)
        >>> list(query_folders(tmp_path / "top_events"))
        ['table.top_events_5min']
    """
    return {path.name: path for path in listing(app_folder) if offsets_log(path).is_dir()}


def batch_ids(log: StoragePath) -> list[int]:
    """The batch ids of the files of `log` (a query's `offsets/` or `commits/`), ascending.

    Example:
        >>> (tmp_path / "commits").mkdir()
        >>> for name in ("2", "0", "1", ".1.crc"):
        ...     _ = (tmp_path / "commits" / name).write_text("v1")
        >>> batch_ids(tmp_path / "commits")
        [0, 1, 2]
    """
    if not log.is_dir():
        return []
    return sorted(int(path.name) for path in log.iterdir() if path.name.isdigit())


def read_offsets(path: StoragePath) -> tuple[JsonObject, list[object]]:
    r"""An `offsets/N` file: its metadata and each source's offsets (None: none yet).

    Raises `UnreadableLogError` for a file that is missing or not as Spark writes it.

    Example:
        >>> _ = (tmp_path / "2").write_text(
        ...     'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1767225600000}\n{"clicks":{"0":7}}\n')
        >>> read_offsets(tmp_path / "2")
        ({'batchWatermarkMs': 0, 'batchTimestampMs': 1767225600000}, [{'clicks': {'0': 7}}])
    """
    lines = _log_lines(path)
    offsets: list[object] = []
    for number, line in enumerate(lines[2:], start=3):
        known = line not in ("", "-")
        offsets.append(_json(path, line, number, "an input's offsets") if known else None)
    return _header(path, lines), offsets


def read_commit(path: StoragePath) -> JsonObject:
    r"""A `commits/N` file's metadata; `UnreadableLogError` for one not as Spark writes it.

    Example:
        >>> _ = (tmp_path / "2").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
        >>> read_commit(tmp_path / "2")
        {'nextBatchWatermarkMs': 0}
    """
    return _header(path, _log_lines(path))


def kafka_offsets(source: object) -> dict[str, Offsets]:
    """The offsets per stream and bucket of a Kafka source: an `offsets/N` entry, or its JSON.

    A source's offsets are `{"stream": {"bucket": offset}}`, as the log and a query's
    progress give them (as text, or read from it); anything else gives no offsets.

    Example:
        >>> kafka_offsets({"clicks": {"0": 7, "1": 3}})
        {'clicks': {0: 7, 1: 3}}
        >>> kafka_offsets('{"clicks": {"0": 7}}')
        {'clicks': {0: 7}}
    """
    if isinstance(source, str):
        try:
            source = json.loads(source)
        except json.JSONDecodeError:
            return {}
    if not isinstance(source, dict):
        return {}
    try:
        return {
            stream: {int(bucket): int(offset) for bucket, offset in buckets.items()}
            for stream, buckets in source.items()
            if isinstance(buckets, dict)
        }
    except (ValueError, TypeError):
        return {}  # a bucket or an offset that is not a number


def stream_offsets(source: object, stream: str) -> Offsets | None:
    """The offsets of `stream` in a Kafka source's offsets (see `kafka_offsets`), if it has them.

    Example:
        >>> stream_offsets('{"clicks": {"0": 7}}', "clicks")
        {0: 7}
        >>> stream_offsets(None, "clicks") is None
        True
    """
    return kafka_offsets(source).get(stream)


def initial_offsets_files(checkpoint: StoragePath) -> dict[str, StoragePath]:
    """The `sources/<i>/0` file of each source `<i>` of the query at `checkpoint`.

    Each holds the offsets the source started from (see `read_initial_offsets`).
    """
    return {path.parent.name: path for path in listing(checkpoint / "sources", "*/0")}


def initial_offsets_file(checkpoint: StoragePath, source: str) -> StoragePath:
    """The `sources/<source>/0` file of the query at `checkpoint`, there or not."""
    return checkpoint / "sources" / source / "0"


def read_initial_offsets(path: StoragePath) -> dict[str, Offsets]:
    r"""A Kafka source's starting offsets (a `sources/<i>/0` file), per stream and bucket.

    Raises `UnreadableLogError` for a file that is not as Spark writes it.

    Example:
        >>> _ = (tmp_path / "0").write_bytes(b'\0v1\n{"clicks":{"0":7}}')
        >>> read_initial_offsets(tmp_path / "0")
        {'clicks': {0: 7}}
    """
    lines = _log_lines(path, after_zero_bytes=True)
    if len(lines) < 2:
        raise UnreadableLogError(path, "it ends after its version line: the offsets are missing")
    parsed = _json(path, lines[1], 2, "a source's starting offsets")
    if not isinstance(parsed, dict) or set(kafka_offsets(parsed)) != set(parsed):
        raise UnreadableLogError(path, "line 2 is not offsets per stream and bucket")
    return kafka_offsets(parsed)


def write_initial_offsets(path: StoragePath, offsets: dict[str, Offsets]) -> None:
    r"""Write a Kafka source's starting offsets to `path` (a `sources/<i>/0` file) as Spark does.

    Example:
        >>> write_initial_offsets(tmp_path / "sources" / "0" / "0", {"clicks": {1: 3, 0: 7}})
        >>> (tmp_path / "sources" / "0" / "0").read_bytes()
        b'\x00v1\n{"clicks": {"0": 7, "1": 3}}'
    """
    text = json.dumps(
        {stream: {str(b): o for b, o in sorted(by.items())} for stream, by in offsets.items()}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    # Spark's Kafka source writes a zero byte first, then its version and the offsets.
    path.write_bytes(b"\0v1\n" + text.encode())


def last_committed(checkpoint: StoragePath) -> tuple[int, dict[str, Offsets]] | None:
    r"""The newest committed batch of the query at `checkpoint`, and the offsets it read to.

    The offsets are per stream and bucket, over all the query's Kafka sources; None when no
    batch has committed. Raises
    `UnreadableLogError` for an `offsets/N` file that is not as Spark writes it.

    Example:
        >>> for log in ("offsets", "commits"):
        ...     (tmp_path / log).mkdir()
        ...     _ = (tmp_path / log / "0").write_text('v1\n{}\n{"clicks":{"0":7}}\n')
        >>> last_committed(tmp_path)
        (0, {'clicks': {0: 7}})
    """
    commits = batch_ids(commits_log(checkpoint))
    if not commits:
        return None
    _, sources = read_offsets(offsets_log(checkpoint) / str(commits[-1]))
    offsets: dict[str, Offsets] = {}
    for source in sources:
        for stream, buckets in kafka_offsets(source).items():
            offsets.setdefault(stream, {}).update(buckets)
    return commits[-1], offsets


def newest_metadata(checkpoint: StoragePath) -> JsonObject | None:
    """The metadata of the newest `offsets/N` file of the query at `checkpoint`; None if none.

    Raises `UnreadableLogError` for a file that is not as Spark writes it.
    """
    batches = batch_ids(offsets_log(checkpoint))
    if not batches:
        return None
    header, _ = read_offsets(offsets_log(checkpoint) / str(batches[-1]))
    return header


def _log_lines(path: StoragePath, *, after_zero_bytes: bool = False) -> list[str]:
    """The lines of a log file, from its version line on.

    `after_zero_bytes` skips the zero bytes a Kafka source writes before the version line of
    its starting offsets.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UnreadableLogError(path, f"it cannot be read ({error.strerror})") from None
    if after_zero_bytes:
        data = data.lstrip(b"\0")
    if not data.strip():
        raise UnreadableLogError(path, "it is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableLogError(
            path, f"it is not text (byte {error.start} is 0x{data[error.start]:02x})"
        ) from None
    lines = text.splitlines()
    if not _VERSION_LINE.match(lines[0]):
        raise UnreadableLogError(
            path, f"its first line is {lines[0][:40]!r}, not Spark's log version (such as v1)"
        )
    return lines


def _header(path: StoragePath, lines: list[str]) -> JsonObject:
    if len(lines) < 2:
        raise UnreadableLogError(
            path, "it ends after its version line: the batch's metadata is missing"
        )
    header = _json(path, lines[1], 2, "the batch's metadata")
    if not isinstance(header, dict):
        raise UnreadableLogError(path, "line 2 is not the batch's metadata (a JSON object)")
    return header


def _json(path: StoragePath, line: str, number: int, what: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise UnreadableLogError(
            path, f"line {number} is not {what} as JSON ({error.msg} at column {error.colno})"
        ) from None


def records_waiting(sources: Iterable[Mapping[str, Any]]) -> int:
    """The records a batch's input streams had beyond what it read, when it was planned.

    `sources` are the `sources` of a metrics record (`SourceRecord`s, or the same read back
    from the bus); an app's own internal streams (its ticks and wake-ups) are no input.

    Example:
        >>> records_waiting([{"end_offsets": {"clicks": {"0": 9, "1": 4}},
        ...                   "latest_offsets": {"clicks": {"0": 12, "1": 4}}}])
        3
    """
    waiting = 0
    for source in sources:
        ended = source.get("end_offsets") or {}
        for stream, latest in (source.get("latest_offsets") or {}).items():
            if is_internal_stream(stream):
                continue
            for bucket, offset in (latest or {}).items():
                reached = (ended.get(stream) or {}).get(bucket, offset)
                waiting += max(0, int(offset) - int(reached))
    return waiting
