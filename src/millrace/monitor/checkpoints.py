"""What an app's Spark checkpoints say: its queries, and the input offsets each has committed.

Spark writes a micro-batch's input offsets to `<query>/offsets/<batch>` before running it and
marks it done in `<query>/commits/<batch>` after (`millrace.engine.checkpoint_log` reads
them). The offsets of the newest committed batch are where the query has read up to: the
records before them are processed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from millrace.config.storage import StoragePath
from millrace.config.workspace import Workspace
from millrace.engine.checkpoint_log import (
    Offsets,
    UnreadableLogError,
    batch_ids,
    kafka_offsets,
    query_folders,
    read_offsets,
)


@dataclass(frozen=True)
class QueryCheckpoint:
    """One query's checkpoint: its last committed batch, when, and the offsets it reached."""

    app: str
    query: str
    path: StoragePath
    batch_id: int | None = None
    committed_ms: int | None = None
    offsets: dict[str, Offsets] = field(default_factory=dict)


def app_names(workspace: Workspace) -> list[str]:
    """The apps that have a checkpoint in `workspace`, sorted.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> for app in ("zeitgeist", "top_events"):
        ...     (workspace.checkpoints_dir / app / "query" / "offsets").mkdir(parents=True)
        >>> app_names(workspace)
        ['top_events', 'zeitgeist']
    """
    root = workspace.checkpoints_dir
    if not root.is_dir():
        return []
    return sorted(app.name for app in root.iterdir() if app.is_dir() and query_folders(app))


def app_checkpoints(workspace: Workspace, app: str) -> list[QueryCheckpoint]:
    """The checkpoint of each streaming query of `app` (none when it has never run)."""
    folders = query_folders(workspace.checkpoints_dir / app)
    return [_read_query(app, folder) for folder in folders.values()]


def _read_query(app: str, folder: StoragePath) -> QueryCheckpoint:
    commits = batch_ids(folder / "commits")
    if not commits:
        return QueryCheckpoint(app, folder.name, folder)
    last = commits[-1]
    offsets: dict[str, Offsets] = {}
    try:
        _, sources = read_offsets(folder / "offsets" / str(last))
    except UnreadableLogError:
        # The query's offsets are then unknown, and its lag comes from its published
        # batches (`status`); `millrace history` names what is wrong with the file.
        sources = []
    for source in sources:
        # A stream is read by one source per bucket (millrace.engine.low_watermark).
        for stream, buckets in kafka_offsets(source).items():
            offsets.setdefault(stream, {}).update(buckets)
    return QueryCheckpoint(
        app,
        folder.name,
        folder,
        batch_id=last,
        committed_ms=int((folder / "commits" / str(last)).stat().st_mtime * 1000),
        offsets=offsets,
    )
