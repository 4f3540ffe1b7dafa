"""What an app's Spark checkpoints say: its queries, and the input offsets each has committed.

Spark writes a micro-batch's input offsets to `<query>/offsets/<batch>` before running it and
marks it done in `<query>/commits/<batch>` after. The offsets of the newest committed batch
are where the query has read up to: the records before them are processed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from millrace.config.workspace import Workspace

Offsets = dict[int, int]
"""The offset of each bucket of one stream."""


@dataclass(frozen=True)
class QueryCheckpoint:
    """One query's checkpoint: its last committed batch, when, and the offsets it reached."""

    app: str
    query: str
    path: Path
    batch_id: int | None = None
    committed_ms: int | None = None
    offsets: dict[str, Offsets] = field(default_factory=dict)


def app_names(workspace: Workspace) -> list[str]:
    """The apps that have a checkpoint in `workspace`, sorted.

    Example:
        >>> app_names(workspace)  # doctest: +SKIP
        ['top_events', 'zeitgeist']
    """
    root = workspace.checkpoints_dir
    if not root.is_dir():
        return []
    return sorted(app.name for app in root.iterdir() if app.is_dir() and any(_query_dirs(app)))


def app_checkpoints(workspace: Workspace, app: str) -> list[QueryCheckpoint]:
    """The checkpoint of each streaming query of `app` (none when it has never run)."""
    folder = workspace.checkpoints_dir / app
    return [_read_query(app, query) for query in _query_dirs(folder)] if folder.is_dir() else []


def _query_dirs(app_folder: Path) -> list[Path]:
    # A query's folder holds `offsets/`; the dead-letter routers' folders next to it do not.
    return sorted(path for path in app_folder.iterdir() if (path / "offsets").is_dir())


def _read_query(app: str, folder: Path) -> QueryCheckpoint:
    commits = (
        [path for path in (folder / "commits").glob("*") if path.name.isdigit()]
        if (folder / "commits").is_dir()
        else []
    )
    if not commits:
        return QueryCheckpoint(app, folder.name, folder)
    last = max(commits, key=lambda path: int(path.name))
    offsets_file = folder / "offsets" / last.name
    offsets: dict[str, Offsets] = {}
    if offsets_file.exists():
        # Line 1 is the log's version, line 2 the batch's metadata, then one line per source.
        # A file that is not text reads as lines that are not offsets: the query's offsets
        # are then unknown, and its lag comes from its published batches (`status`);
        # `millrace history` names what is wrong with the file.
        text = offsets_file.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines()[2:]:
            # A stream is read by one source per bucket (millrace.engine.low_watermark).
            for stream, buckets in _kafka_offsets(line).items():
                offsets.setdefault(stream, {}).update(buckets)
    return QueryCheckpoint(
        app,
        folder.name,
        folder,
        batch_id=int(last.name),
        committed_ms=int(last.stat().st_mtime * 1000),
        offsets=offsets,
    )


def _kafka_offsets(line: str) -> dict[str, Offsets]:
    try:
        parsed = json.loads(line)
        if not isinstance(parsed, dict):
            return {}
        return {
            stream: {int(bucket): int(offset) for bucket, offset in buckets.items()}
            for stream, buckets in parsed.items()
            if isinstance(buckets, dict)
        }
    except (ValueError, TypeError):
        # Not JSON, or not offsets: a bucket or an offset that is not a number.
        return {}
