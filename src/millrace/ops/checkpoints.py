"""An app's checkpoints as the operator sees them: the batch history, and moving it back.

Every streaming query of an app keeps a Spark checkpoint under
`<workspace>/checkpoints/<app>/<query>/` (a SQL app has one query per output, a processor
one). Spark's write-ahead log there is two folders of files named by batch id: `offsets/N`,
written before batch N runs (its end offsets per input, its watermark and start time), and
`commits/N`, written once its output is committed (`millrace.engine.checkpoint_log` reads
them). State lives under `state/<operator>/<partition>/` in files named by the state
version, which is the batch id plus one: RocksDB writes `V.changelog` files and `V.zip` (or
`V_<uuid>.zip`) snapshots, the HDFS provider `V.delta` and `V.snapshot`;
`state/<operator>/_metadata/` and `_stateSchema/` keep per-batch operator metadata and state
schemas, also named by batch id.

`history` reads the log; `rollback` moves a query back to the end of batch N, as the
Structured Streaming paper's section 7.2 describes: it moves the log entries after N and the
state versions after N + 1 into a backup folder, so that Spark, started again, resumes after
batch N, from the state as batch N left it, and recomputes the later batches from their
inputs. Outputs of the recomputed batches are written again; millrace's sinks make that
idempotent (result tables merge by key, stream records carry deterministic ids).

A file of the log that cannot be read (not text, not Spark's format, not JSON) is a
`CheckpointCorruptError` naming the file, what is wrong with it, and the last good batch to
roll back to; `verify` looks at the files Spark reads to resume, before an app starts.

`app_checkpoints` and `app_names` are what the monitor reads: the newest committed batch of
each query and the input offsets it reached, the records before which are processed.

A query without a checkpoint starts over from the start of its inputs and writes all its
output again, which is right for a new query and wrong for one that has run: so `remember`
records, outside the checkpoint (in `<workspace>/apps/<app>/checkpoints.json`), each query
that has committed a batch, and `require_checkpoints` refuses to start an app whose queries
ran before but have lost their checkpoints (`CheckpointMissingError`). An app without that
record (it ran under an older millrace) is judged by its result tables. `forget` takes
queries off the record, for a start over on purpose (`start_over`) or a rollback to before
a query's first batch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from millrace.config.storage import StoragePath, listing, move, relative_to
from millrace.config.workspace import DEAD_LETTER_MARKS, DEAD_LETTER_QUERY_PREFIX, Workspace
from millrace.engine.checkpoint_log import (
    Offsets,
    UnreadableLogError,
    batch_ids,
    initial_offsets_file,
    initial_offsets_files,
    last_committed,
    query_folders,
    read_commit,
    read_initial_offsets,
    read_offsets,
    write_initial_offsets,
)
from millrace.errors import CheckpointCorruptError, CheckpointMissingError, LifecycleError
from millrace.ops.registry import now_iso
from millrace.warehouse.delta import is_delta_table

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
    offsets: list[object]
    started_ms: int | None
    committed_ms: int | None
    watermark_ms: int | None

    def as_dict(self) -> dict[str, object]:
        """The batch as JSON-able data."""
        return {
            "query": self.query,
            "batch": self.batch_id,
            "offsets": self.offsets,
            "started": _iso(self.started_ms),
            "committed": _iso(self.committed_ms),
            "watermark_ms": self.watermark_ms,
        }


def query_checkpoints(workspace: Workspace, app: str) -> dict[str, StoragePath]:
    """The checkpoint folder of each query of `app` that has one, by query name."""
    return query_folders(workspace.app_checkpoints(app))


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
        ...     (workspace.checkpoint(app, "query") / "offsets").mkdir(parents=True)
        >>> app_names(workspace)
        ['top_events', 'zeitgeist']
    """
    root = workspace.checkpoints_dir
    if not root.is_dir():
        return []
    return sorted(app.name for app in root.iterdir() if app.is_dir() and query_folders(app))


def app_checkpoints(workspace: Workspace, app: str) -> list[QueryCheckpoint]:
    """The checkpoint of each streaming query of `app` (none when it has never run).

    A query whose newest committed batch's offsets cannot be read has none: its lag then
    comes from its published batches (`millrace.monitor.status`), and `millrace history`
    names what is wrong with the file.
    """
    found = []
    for query, folder in query_checkpoints(workspace, app).items():
        try:
            committed = last_committed(folder)
        except UnreadableLogError:
            commits = batch_ids(folder / "commits")
            committed = (commits[-1], {}) if commits else None
        if committed is None:
            found.append(QueryCheckpoint(app, query, folder))
            continue
        batch_id, offsets = committed
        committed_ms = int((folder / "commits" / str(batch_id)).stat().st_mtime * 1000)
        found.append(QueryCheckpoint(app, query, folder, batch_id, committed_ms, offsets))
    return found


def history(workspace: Workspace, app: str, *, strict: bool = True) -> list[Batch]:
    r"""Every batch in the write-ahead logs of `app`'s queries, by query then batch id.

    Raises `CheckpointCorruptError` for a log file that cannot be read; with `strict` off,
    such a batch is listed without offsets, start time or watermark instead.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> query = workspace.checkpoints_dir / "top_events" / "table.top_events_5min"
        >>> (query / "offsets").mkdir(parents=True)
        >>> header = '{"batchWatermarkMs":0,"batchTimestampMs":1767225600000}'
        >>> for batch_id in (0, 1):
        ...     _ = (query / "offsets" / str(batch_id)).write_text(f"v1\n{header}\n{{}}\n")
        >>> [(batch.query, batch.batch_id) for batch in history(workspace, "top_events")]
        [('table.top_events_5min', 0), ('table.top_events_5min', 1)]
    """
    batches = []
    for query, checkpoint in query_checkpoints(workspace, app).items():
        commits = checkpoint / "commits"
        for batch_id in batch_ids(checkpoint / "offsets"):
            commit = commits / str(batch_id)
            try:
                header, offsets = read_offsets(checkpoint / "offsets" / str(batch_id))
                if commit.is_file():
                    read_commit(commit)
            except UnreadableLogError as error:
                if strict:
                    raise _corrupt(workspace, app, query, error) from None
                header, offsets = {}, []
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


def verify(workspace: Workspace, app: str) -> None:
    """Check the log files Spark reads to resume each query of `app`, before it starts.

    Those are the two newest `offsets/N` (the newest may be a batch that did not commit) and
    the newest `commits/N`. Raises `CheckpointCorruptError` for one that cannot be read.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> offsets = workspace.checkpoints_dir / "top_events" / "table.top_events_5min" / "offsets"
        >>> offsets.mkdir(parents=True)
        >>> _ = (offsets / "0").write_text("")
        >>> try:
        ...     verify(workspace, "top_events")
        ... except CheckpointCorruptError as error:
        ...     print(error.message.replace(str(tmp_path), "<tmp>"))
        checkpoint file <tmp>/checkpoints/top_events/table.top_events_5min/offsets/0 (batch 0 of
        query table.top_events_5min of app 'top_events') cannot be read: it is empty
    """
    for query, checkpoint in query_checkpoints(workspace, app).items():
        try:
            for batch_id in batch_ids(checkpoint / "offsets")[-2:]:
                read_offsets(checkpoint / "offsets" / str(batch_id))
            for batch_id in batch_ids(checkpoint / "commits")[-1:]:
                read_commit(checkpoint / "commits" / str(batch_id))
        except UnreadableLogError as error:
            raise _corrupt(workspace, app, query, error) from None


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
    backup: StoragePath


def rollback(
    workspace: Workspace, app: str, to_batch: dict[str, int], backup: StoragePath
) -> Rollback:
    """Move each named query of `app` back to the end of its batch `to_batch[query]`.

    Files after that point (log entries after the batch, state versions after batch + 1,
    operator metadata and state schemas after the batch) are moved under `backup/<query>/`
    with their relative paths, so the rollback can be undone by moving them back. A batch of
    -1 moves the query back to before its first batch: its whole checkpoint is moved aside.
    The app must not be running. Raises `LifecycleError` for a batch the log does not have.
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
        committed = batch_ids(checkpoint / "commits")
        if batch_id >= 0 and batch_id not in committed:
            raise LifecycleError(
                f"query {query!r} of app {app!r} has no committed batch {batch_id}",
                hint=f"committed batches: {_ranges(committed)}; see `millrace history {app}`",
            )
        removed[query] = [n for n in batch_ids(checkpoint / "offsets") if n > batch_id]
        target = backup / query
        if batch_id < 0:
            move(checkpoint, target)
            continue
        for path in _after(checkpoint, batch_id):
            destination = target / relative_to(path, checkpoint)
            move(path, destination)
            # Hadoop's checksum file goes with it, or Spark finds a checksum of nothing.
            crc = path.with_name(f".{path.name}.crc")
            if crc.exists():
                move(crc, destination.with_name(crc.name))
    return Rollback(dict(to_batch), removed, backup)


def _after(checkpoint: StoragePath, batch_id: int) -> list[StoragePath]:
    """The files of `checkpoint` that belong to batches after `batch_id`."""
    found: list[StoragePath] = [
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
        parts = relative_to(path, state).split("/")
        in_metadata = any(part in ("_metadata", "_stateSchema") for part in parts)
        named = _BATCH_NAMED.match(path.name)
        if in_metadata and named is not None and int(named["batch"]) > batch_id:
            found.append(path)
    return found


def _corrupt(
    workspace: Workspace, app: str, query: str, error: UnreadableLogError
) -> CheckpointCorruptError:
    """The error for an unreadable log file of `query`, naming the batch to roll back to."""
    checkpoint = workspace.checkpoint(app, query)
    bad = int(error.path.name)
    good = _last_good(checkpoint, bad)
    backups = workspace.backups(app)
    if good is not None:
        hint = (
            f"`millrace rollback {app} --to-batch {good}` moves the app back to batch {good}, "
            f"the last one that can be read (this file and the later ones are kept under "
            f"{backups}/), and the batches after it are computed again from the inputs"
        )
    else:
        hint = (
            f"no batch of query {query} before it can be read: start the app over with "
            f"--fresh (`millrace restart {app} --fresh`, or `millrace run APP --fresh`), "
            f"which keeps the checkpoint under {backups}/"
        )
    return CheckpointCorruptError(
        f"checkpoint file {error.path} (batch {bad} of query {query} of app {app!r}) cannot "
        f"be read: {error.reason}",
        hint=hint,
    )


def _last_good(checkpoint: StoragePath, before: int) -> int | None:
    """The newest committed batch before `before` whose log files can be read, if any."""
    for batch_id in reversed(batch_ids(checkpoint / "commits")):
        if batch_id >= before:
            continue
        try:
            read_offsets(checkpoint / "offsets" / str(batch_id))
            read_commit(checkpoint / "commits" / str(batch_id))
        except UnreadableLogError:
            continue
        return batch_id
    return None


def remember(workspace: Workspace, app: str) -> None:
    """Record each query of `app` whose checkpoint has committed a batch (`LEDGER_FILE`).

    Queries recorded before stay recorded (until `forget`), whatever their checkpoints
    hold now: that is what tells a lost checkpoint from a new query.
    """
    recorded = _ledger(workspace, app)
    queries = dict(recorded or {})
    for query, checkpoint in query_checkpoints(workspace, app).items():
        if query not in queries and batch_ids(checkpoint / "commits"):
            queries[query] = now_iso()
    if recorded is None or queries != recorded:
        _write_ledger(workspace, app, queries)


def forget(workspace: Workspace, app: str, queries: list[str] | None = None) -> None:
    """Take `queries` (None: every query) of `app` off the record of those that have run.

    For a start over on purpose: the queries' checkpoints were moved aside, and their
    starting again from nothing is what is asked. Queries with committed batches stay.
    """
    recorded = _ledger(workspace, app) or {}
    kept = {} if queries is None else {q: at for q, at in recorded.items() if q not in queries}
    _write_ledger(workspace, app, kept)
    remember(workspace, app)


def require_checkpoints(
    workspace: Workspace, app: str, queries: Sequence[str], tables: Sequence[str] = ()
) -> None:
    """Refuse to start `app` when any of its `queries` ran before but has no checkpoint now.

    That a query ran is known from the record `remember` keeps or, for an app without one,
    from the Delta log of its result table (`tables` are the app's result table names; the
    query of table T is `table.T`). Raises `CheckpointMissingError`. A query that never
    committed a batch (a new app, a new query) starts without a word.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> import pyarrow as pa
        >>> from deltalake import write_deltalake
        >>> table = workspace.result_table("top_events", "top_events_5min")
        >>> write_deltalake(str(table), pa.table({"n": [1]}))
        >>> try:
        ...     require_checkpoints(workspace, "top_events", ["table.top_events_5min"],
        ...                         ["top_events_5min"])
        ... except CheckpointMissingError as error:
        ...     print(error.message.replace(str(tmp_path), "<tmp>"))
        app 'top_events' has run before (their result tables exist, under <tmp>/tables/top_events),
        but the checkpoint of query table.top_events_5min is missing (no write-ahead log under
        <tmp>/checkpoints/top_events/<query>/offsets): started without it, a query reads its
        inputs from the start again and writes all its output again
    """
    root = workspace.app_checkpoints(app)
    present = set(query_checkpoints(workspace, app))
    recorded = _ledger(workspace, app)
    if recorded is not None:
        missing = [query for query in queries if query in recorded and query not in present]
        evidence = f"{workspace.checkpoint_ledger(app)} records their committed batches"
    else:
        tables_of = {f"table.{table}": workspace.result_table(app, table) for table in tables}
        missing = [
            query
            for query in queries
            if query in tables_of and query not in present and is_delta_table(tables_of[query])
        ]
        evidence = "their result tables exist, under " + str(workspace.app_tables(app))
    if not missing:
        return
    which = (
        f"the checkpoint of query {missing[0]} is"
        if len(missing) == 1
        else f"the checkpoints of queries {', '.join(missing)} are"
    )
    raise CheckpointMissingError(
        f"app {app!r} has run before ({evidence}), but {which} missing (no write-ahead log "
        f"under {root}/<query>/offsets): started without it, a query reads its inputs from "
        "the start again and writes all its output again",
        hint=(
            "if the checkpoint was moved, put it back; to start every query over on purpose, "
            f"start the app with --fresh (what is left of the checkpoint is kept under "
            f"{workspace.backups(app)}/); to compute batches again, "
            f"`millrace rollback {app} --to-batch N` moves the app back to batch N and keeps "
            "a backup, which deleting checkpoint folders does not"
        ),
    )


def _ledger(workspace: Workspace, app: str) -> dict[str, str] | None:
    path = workspace.checkpoint_ledger(app)
    if not path.is_file():
        return None
    try:
        queries = json.loads(path.read_text(encoding="utf-8")).get("queries")
    except (OSError, ValueError, AttributeError):
        return None  # unreadable: judged by the result tables, as an app without one
    return dict(queries) if isinstance(queries, dict) else None


def _write_ledger(workspace: Workspace, app: str, queries: dict[str, str]) -> None:
    path = workspace.checkpoint_ledger(app)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"checkpoint": str(workspace.app_checkpoints(app)), "queries": queries}
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)


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
    old: StoragePath, new: StoragePath, offsets_of: Callable[[str], dict[int, int]]
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
    for query in listing(old):
        for source, path in initial_offsets_files(query).items():
            offsets = {stream: offsets_of(stream) for stream in _initial_offsets(path)}
            write_initial_offsets(initial_offsets_file(new / query.name, source), offsets)
            seeded.setdefault(query.name, {}).update(offsets)
        prefix = DEAD_LETTER_QUERY_PREFIX
        if query.name.startswith(prefix) and (query / DEAD_LETTER_MARKS).is_file():
            routed = offsets_of(query.name.removeprefix(prefix))
            target = new / query.name / DEAD_LETTER_MARKS
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(_as_json(routed)))
    return seeded


def _initial_offsets(path: StoragePath) -> dict[str, dict[int, int]]:
    try:
        return read_initial_offsets(path)
    except UnreadableLogError as error:
        raise CheckpointCorruptError(
            f"checkpoint file {error.path} (a query's starting offsets) cannot be read: "
            f"{error.reason}",
            hint="`millrace restart APP --fresh` without --from starts from the earliest "
            "records, without reading it",
        ) from None


def _as_json(offsets: dict[int, int]) -> dict[str, int]:
    return {str(bucket): offset for bucket, offset in sorted(offsets.items())}
