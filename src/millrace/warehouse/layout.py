"""What the warehouse holds: an archive table per stream, its columns, the streams to archive.

The warehouse is the `warehouse/` folder of the storage root (the workspace, or
`storage.root`; `millrace.config.workspace` names its paths), the paper's Hive. Each archived
stream is one Delta table, `warehouse/<stream>`, holding each record as the bus stored it:
Kafka's `key`, `value`, `headers`, `partition`, `offset` and `timestamp` (arrival) columns,
plus the `event_date` partition column: the UTC date of the event time in the value's time
field, or of the arrival when the value holds no readable time. Storing the raw record is
the point: a backfill decodes an archived record with exactly the code that decodes it on a
live read, so it gives the same results and routes the same records to the dead-letter
stream.

The archive job of a stream keeps its checkpoint under `checkpoints/_archive/<stream>`.
Streams created with `millrace stream create --archive` are listed in `warehouse/streams.json`.
"""

from __future__ import annotations

import json
import re

from millrace.config.storage import StoragePath
from millrace.config.workspace import Workspace
from millrace.errors import WarehouseError
from millrace.warehouse.delta import is_delta_table

EVENT_DATE = "event_date"
"""The partition column of an archive table: the UTC date of the record's event time."""

ARCHIVE_COLUMNS = ("key", "value", "headers", "partition", "offset", "timestamp", EVENT_DATE)
"""The columns of an archive table, in order: Kafka's record columns, then `EVENT_DATE`."""

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


def is_archived(workspace: Workspace, stream: str) -> bool:
    """True when `stream` has an archive table (its job has committed a first batch)."""
    return is_delta_table(workspace.archive(stream))


def archived_streams(workspace: Workspace) -> list[str]:
    """The streams that have an archive table, sorted by name."""
    folder = workspace.warehouse_dir
    if not folder.is_dir():
        return []
    return sorted(path.name for path in folder.iterdir() if is_delta_table(path))


def require_archive(workspace: Workspace, stream: str) -> StoragePath:
    """The archive table of `stream`; `WarehouseError` saying how to make it when it is missing.

    Example:
        >>> require_archive(Workspace(Path("/ws")), "clicks")
        Traceback (most recent call last):
        ...
        millrace.errors.WarehouseError: stream 'clicks' has no archive (nothing at /ws/...)
    """
    path = workspace.archive(stream)
    if not is_archived(workspace, stream):
        raise WarehouseError(
            f"stream {stream!r} has no archive (nothing at {path})",
            hint=f"archive it first: `millrace archive {stream} --available-now`",
        )
    return path


def mark_for_archive(workspace: Workspace, stream: str) -> None:
    """Record that `stream` is to be archived, as `millrace stream create --archive` does."""
    marked = set(streams_marked_for_archive(workspace)) | {stream}
    path = workspace.archive_marks
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sorted(marked), indent=2) + "\n", encoding="utf-8")


def streams_marked_for_archive(workspace: Workspace) -> list[str]:
    """The streams created with `--archive`, sorted by name."""
    path = workspace.archive_marks
    if not path.is_file():
        return []
    return sorted(json.loads(path.read_text(encoding="utf-8")))


def view_name(*parts: str) -> str:
    """A SQL name made of `parts` joined by `__`, with every character Spark refuses as `_`.

    Example:
        >>> view_name("warehouse", "test.clicks-2")
        'warehouse__test_clicks_2'
    """
    return "__".join(_NOT_IDENTIFIER.sub("_", part) for part in parts)
