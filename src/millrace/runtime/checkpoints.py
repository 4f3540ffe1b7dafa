"""An app's checkpoints as the operator sees them: the batch history, and moving it back.

Every streaming query of an app keeps a Spark checkpoint under
`<workspace>/checkpoints/<app>/<query>/` (a SQL app has one query per output, a processor
one). Spark's write-ahead log there is two folders of files named by batch id: `offsets/N`,
written before batch N runs (its end offsets per input, its watermark and start time), and
`commits/N`, written once its output is committed. State lives under `state/<operator>/
<partition>/` in files named by the state version, which is the batch id plus one: RocksDB
writes `V.changelog` files and `V.zip` (or `V_<uuid>.zip`) snapshots, the HDFS provider
`V.delta` and `V.snapshot`; `state/<operator>/_metadata/` and `_stateSchema/` keep per-batch
operator metadata and state schemas, also named by batch id.

`history` reads the log; `rollback` moves a query back to the end of batch N, as the
Structured Streaming paper's section 7.2 describes: it moves the log entries after N and the
state versions after N + 1 into a backup folder, so that Spark, started again, resumes after
batch N, from the state as batch N left it, and recomputes the later batches from their
inputs. Outputs of the recomputed batches are written again; millrace's sinks make that
idempotent (result tables merge by key, stream records carry deterministic ids).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from millrace.config.workspace import Workspace
from millrace.errors import LifecycleError

_VERSIONED = re.compile(r"^(?P<version>\d+)(?:_[^.]*)?\.(?:changelog|zip|delta|snapshot)$")
_BATCH_NAMED = re.compile(r"^(?P<batch>\d+)(?:_.*)?$")


@dataclass(frozen=True)
class Batch:
    """One batch of one query, from its write-ahead log.

    `offsets` are the end offsets per input as Spark wrote them (for Kafka,
    `{"stream": {"bucket": offset}}`), one entry per source; `started_ms` is when Spark
    planned it; `committed_ms` when its commit was written (None while running or failed);
    `watermark_ms` the event-time watermark it ran with.
    """

    query: str
    batch_id: int
    offsets: list[Any]
    started_ms: int | None
    committed_ms: int | None
    watermark_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """The batch as JSON-able data."""
        return {
            "query": self.query,
            "batch": self.batch_id,
            "offsets": self.offsets,
            "started": _iso(self.started_ms),
            "committed": _iso(self.committed_ms),
            "watermark_ms": self.watermark_ms,
        }


def query_checkpoints(workspace: Workspace, app: str) -> dict[str, Path]:
    """The checkpoint folder of each query of `app` that has one, by query name."""
    root = workspace.checkpoints_dir / app
    if not root.is_dir():
        return {}
    return {path.name: path for path in sorted(root.iterdir()) if (path / "offsets").is_dir()}


def history(workspace: Workspace, app: str) -> list[Batch]:
    """Every batch in the write-ahead logs of `app`'s queries, by query then batch id.

    Example:
        >>> [b.batch_id for b in history(workspace, "top_events")]  # doctest: +SKIP
        [0, 1, 2, 0, 1]
    """
    batches = []
    for query, checkpoint in query_checkpoints(workspace, app).items():
        commits = checkpoint / "commits"
        for batch_id in _batch_ids(checkpoint / "offsets"):
            header, offsets = _read_offsets(checkpoint / "offsets" / str(batch_id))
            commit = commits / str(batch_id)
            batches.append(
                Batch(
                    query,
                    batch_id,
                    offsets,
                    header.get("batchTimestampMs"),
                    int(commit.stat().st_mtime * 1000) if commit.is_file() else None,
                    header.get("batchWatermarkMs"),
                )
            )
    return batches


def last_batches(workspace: Workspace, app: str) -> dict[str, Batch]:
    """The newest batch of each query of `app`, by query name."""
    newest: dict[str, Batch] = {}
    for batch in history(workspace, app):
        newest[batch.query] = batch
    return newest


def batch_at(batches: list[Batch], time_ms: int) -> dict[str, int]:
    """Per query, the last batch committed at or before `time_ms` (-1: none was)."""
    chosen: dict[str, int] = {batch.query: -1 for batch in batches}
    for batch in batches:
        if batch.committed_ms is not None and batch.committed_ms <= time_ms:
            chosen[batch.query] = max(chosen[batch.query], batch.batch_id)
    return chosen


@dataclass(frozen=True)
class Rollback:
    """What `rollback` did: the batch each query was moved back to, and where the backup is."""

    to_batch: dict[str, int]
    removed_batches: dict[str, list[int]]
    backup: Path


def rollback(workspace: Workspace, app: str, to_batch: dict[str, int], backup: Path) -> Rollback:
    """Move each named query of `app` back to the end of its batch `to_batch[query]`.

    Files after that point (log entries after the batch, state versions after batch + 1,
    operator metadata and state schemas after the batch) are moved under `backup/<query>/`
    with their relative paths, so the rollback can be undone by moving them back. A batch of
    -1 moves the query back to before its first batch: its whole checkpoint is moved aside.
    The app must not be running. Raises `LifecycleError` for a batch the log does not have.

    Example:
        >>> rollback(workspace, "top_events", {"table.top_events_5min": 3},  # doctest: +SKIP
        ...          workspace.root / "apps/top_events/backups/x")
    """
    checkpoints = query_checkpoints(workspace, app)
    removed: dict[str, list[int]] = {}
    for query, batch_id in to_batch.items():
        checkpoint = checkpoints.get(query)
        if checkpoint is None:
            raise LifecycleError(
                f"app {app!r} has no checkpoint for query {query!r}",
                hint=f"its queries: {', '.join(checkpoints) or 'none'}",
            )
        committed = _batch_ids(checkpoint / "commits")
        if batch_id >= 0 and batch_id not in committed:
            raise LifecycleError(
                f"query {query!r} of app {app!r} has no committed batch {batch_id}",
                hint=f"committed batches: {_ranges(committed)}; see `millrace history {app}`",
            )
        removed[query] = [n for n in _batch_ids(checkpoint / "offsets") if n > batch_id]
        target = backup / query
        if batch_id < 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(checkpoint), str(target))
            continue
        for path in _after(checkpoint, batch_id):
            destination = target / path.relative_to(checkpoint)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), str(destination))
            # Hadoop's checksum file goes with it, or Spark finds a checksum of nothing.
            crc = path.with_name(f".{path.name}.crc")
            if crc.exists():
                shutil.move(str(crc), str(destination.with_name(crc.name)))
    return Rollback(dict(to_batch), removed, backup)


def _after(checkpoint: Path, batch_id: int) -> list[Path]:
    """The files of `checkpoint` that belong to batches after `batch_id`."""
    found = [
        path
        for log in ("offsets", "commits")
        for path in (checkpoint / log).iterdir()
        if path.name.isdigit() and int(path.name) > batch_id
    ]
    state = checkpoint / "state"
    for path in state.rglob("*") if state.is_dir() else []:
        if not path.is_file() or path.name.startswith("."):
            continue
        versioned = _VERSIONED.match(path.name)
        if versioned is not None:
            # State version V is the state after batch V - 1.
            if int(versioned["version"]) > batch_id + 1:
                found.append(path)
            continue
        in_metadata = any(part in ("_metadata", "_stateSchema") for part in path.parts)
        named = _BATCH_NAMED.match(path.name)
        if in_metadata and named is not None and int(named["batch"]) > batch_id:
            found.append(path)
    return found


def _batch_ids(log: Path) -> list[int]:
    if not log.is_dir():
        return []
    return sorted(int(path.name) for path in log.iterdir() if path.name.isdigit())


def _read_offsets(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """An `offsets/N` file: its header (watermark, time, conf) and each source's offsets."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[1]) if len(lines) > 1 else {}
    offsets = [json.loads(line) if line not in ("", "-") else None for line in lines[2:]]
    return header, offsets


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    return f"{numbers[0]}..{numbers[-1]}" if len(numbers) > 1 else str(numbers[0])


def _iso(time_ms: int | None) -> str | None:
    if time_ms is None:
        return None
    moment = datetime.fromtimestamp(time_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def seed_start(
    old: Path, new: Path, offsets_of: Callable[[str], dict[int, int]]
) -> dict[str, dict[str, dict[int, int]]]:
    """Make the fresh checkpoints under `new` start reading where `offsets_of` says.

    A query without a checkpoint starts at its sources' starting offsets (millrace reads
    from the earliest), which Spark writes at the first start in `sources/<i>/0` and reads
    from there afterwards. For each query of the old checkpoint folder `old`, this writes
    those files for the same sources (a source's stream is read from the old file) with
    the offsets `offsets_of(stream)` gives, and moves the dead-letter routers' marks
    there too, so bad records before the start are not routed again. The new code must read
    the same streams in the same order. Returns, per query, the offsets written per stream.
    """
    seeded: dict[str, dict[str, dict[int, int]]] = {}
    for query in sorted(old.iterdir()) if old.is_dir() else []:
        for source in sorted((query / "sources").glob("*/0")):
            _, old_offsets = _read_initial_offsets(source)
            offsets = {stream: offsets_of(stream) for stream in old_offsets}
            target = new / query.name / "sources" / source.parent.name / "0"
            target.parent.mkdir(parents=True, exist_ok=True)
            text = json.dumps(
                {
                    stream: {str(b): o for b, o in sorted(by.items())}
                    for stream, by in offsets.items()
                }
            )
            # Spark's Kafka source writes a zero byte first, then its version and the offsets.
            target.write_bytes(b"\0v1\n" + text.encode())
            seeded.setdefault(query.name, {}).update(offsets)
        prefix = "dead-letters."
        if query.name.startswith(prefix) and (query / "routed.json").is_file():
            routed = offsets_of(query.name.removeprefix(prefix))
            target = new / query.name / "routed.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(_as_json(routed)))
    return seeded


def _read_initial_offsets(path: Path) -> tuple[str, dict[str, dict[int, int]]]:
    text = path.read_bytes().lstrip(b"\0").decode()
    version, _, offsets = text.partition("\n")
    parsed = json.loads(offsets)
    return version, {s: {int(b): o for b, o in by.items()} for s, by in parsed.items()}


def _as_json(offsets: dict[int, int]) -> dict[str, int]:
    return {str(bucket): offset for bucket, offset in sorted(offsets.items())}
