"""The workspace's app registry: what `millrace deploy` started, in plain JSON files.

Each deployed app has a folder `<workspace>/apps/<app>/` holding `app.json` (its name, kind,
source and the source's hash, the options it runs with, what it declares it reads and writes,
process id, checkpoint, log file, start time and status) and `app.log`, the output of its
process. The deployed process writes
`exit.json` as it ends, so `status` can tell an app that stopped from one that crashed: a
process that is gone without that file died (killed, out of memory, machine restarted).

The files are written whole to a temporary name and renamed, so a reader never sees half a
record; they are meant to be read by people as much as by millrace.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

from millrace.apps.declarations import Declared
from millrace.apps.options import RunOptions
from millrace.apps.sources import Kind
from millrace.config.proc_stat import process_stat
from millrace.config.workspace import Workspace
from millrace.errors import AppNotFoundError
from millrace.records import JsonObject

Status = Literal["running", "stopped", "finished", "crashed"]

STOP_TIMEOUT_S = 120.0
"""How long `millrace stop` waits for an app's running micro-batches before killing it."""


@dataclass(frozen=True)
class AppRecord:
    """One deployed app as the registry keeps it.

    `source` is what `millrace run` takes (an absolute SQL file path, `module:Class` or
    `/abs/file.py:Class`); `source_hash` the SHA-256 of the source file at the last (re)start;
    `options` the options it runs with, `cwd` the folder its process runs in, `declared` what
    its code declares it reads and writes; `pid` the process started for it, whose process
    group holds its Spark JVM too (for an app in the host, the host's process); `proc_start`
    that process's start time in clock ticks since boot, so a recycled pid is not taken for
    the app.

    Example:
        >>> AppRecord("top_events", "sql", "/apps/top_events.sql", "ab12",
        ...           checkpoint="/ws/checkpoints/top_events", log="/ws/apps/x/app.log").trigger
        'micro-batch'
    """

    name: str
    kind: Kind
    source: str
    source_hash: str
    checkpoint: str
    log: str
    options: RunOptions = field(default_factory=RunOptions)
    cwd: str | None = None
    declared: Declared = field(default_factory=Declared)
    pid: int | None = None
    proc_start: int | None = None
    started_at: str | None = None
    stopped_at: str | None = None
    status: Status = "stopped"

    @property
    def trigger(self) -> str:
        """The trigger it runs with, as `--trigger` takes it."""
        return str(self.options.trigger)

    def to_json(self) -> dict[str, object]:
        """The record as `app.json` holds it."""
        return {
            "name": self.name,
            "kind": self.kind,
            "source": self.source,
            "source_hash": self.source_hash,
            "checkpoint": self.checkpoint,
            "log": self.log,
            "options": self.options.to_json(),
            "cwd": self.cwd,
            "declared": self.declared.to_json(),
            "pid": self.pid,
            "proc_start": self.proc_start,
            "started_at": self.started_at,
            "stopped_at": self.stopped_at,
            "status": self.status,
        }

    @classmethod
    def from_json(cls, data: JsonObject) -> AppRecord:
        """The record `to_json` wrote, or one that an older millrace wrote (its `config`)."""
        if "config" in data:
            # Before the options had a type of their own: they and the folder, in one dict.
            config = data.pop("config") or {}
            data = {**data, "options": config, "cwd": config.get("cwd")}
        kind: Kind = "processor" if data.get("kind") == "processor" else "sql"
        status: Status = data["status"] if data.get("status") in get_args(Status) else "stopped"
        return cls(
            name=str(data["name"]),
            kind=kind,
            source=str(data["source"]),
            source_hash=str(data.get("source_hash") or ""),
            checkpoint=str(data["checkpoint"]),
            log=str(data["log"]),
            options=RunOptions.from_json(data.get("options") or {}),
            cwd=data.get("cwd"),
            declared=Declared.from_json(data.get("declared") or {}),
            pid=data.get("pid"),
            proc_start=data.get("proc_start"),
            started_at=data.get("started_at"),
            stopped_at=data.get("stopped_at"),
            status=status,
        )


def save(workspace: Workspace, record: AppRecord) -> None:
    """Write `record` as `apps/<name>/app.json`, replacing the one there."""
    _write_json(workspace.app_record(record.name), record.to_json())


def load(workspace: Workspace, name: str) -> AppRecord:
    """The record of app `name`, its status brought up to date; `AppNotFoundError` if none.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> try:
        ...     load(workspace, "top_events")
        ... except AppNotFoundError as error:
        ...     print(error.hint)
        deployed apps: none yet; start one with `millrace deploy APP`
    """
    path = workspace.app_record(name)
    if not _is_record(path):
        known = ", ".join(record.name for record in list_apps(workspace)) or "none yet"
        raise AppNotFoundError(
            f"no deployed app {name!r} in {workspace.apps_dir}",
            hint=f"deployed apps: {known}; start one with `millrace deploy APP`",
        )
    return _current(workspace, AppRecord.from_json(json.loads(path.read_text(encoding="utf-8"))))


def is_deployed(workspace: Workspace, name: str) -> bool:
    """Whether app `name` has a record in the registry (it was deployed, whatever it does now)."""
    return _is_record(workspace.app_record(name))


def _is_record(path: Path) -> bool:
    """Whether the record file `path` exists; an app name too long for a file name has none."""
    try:
        return path.is_file()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return False
        raise


def list_apps(workspace: Workspace) -> list[AppRecord]:
    """Every app of the registry, by name, with its status brought up to date."""
    root = workspace.apps_dir
    names = (
        sorted(path.name for path in root.iterdir() if is_deployed(workspace, path.name))
        if root.is_dir()
        else []
    )
    return [load(workspace, name) for name in names]


def record_exit(workspace: Workspace, name: str, code: int) -> None:
    """Called by a deployed app's process as it ends (`ops.deployed`): its exit code."""
    _write_json(workspace.app_exit(name), {"code": code, "at": now_iso()})


def clear_exit(workspace: Workspace, name: str) -> None:
    """Forget the last exit of `name`, before starting it again."""
    workspace.app_exit(name).unlink(missing_ok=True)


def source_hash(source: str) -> str:
    """SHA-256 of the file a source names: the SQL file, the `.py` file, or the module's file.

    Example:
        >>> app_file = tmp_path / "app.sql"
        >>> _ = app_file.write_text("CREATE APPLICATION a;")
        >>> source_hash(str(app_file)) == hashlib.sha256(b"CREATE APPLICATION a;").hexdigest()
        True
    """
    path = source_file(source)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None else ""


def source_file(source: str) -> Path | None:
    """The file holding a source's code, or None for a module that cannot be found."""
    if Path(source).is_file():
        return Path(source)
    target = source.rsplit(":", 1)[0]
    if target.endswith(".py"):
        return Path(target) if Path(target).is_file() else None
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def process_alive(pid: int | None, proc_start: int | None) -> bool:
    """True when process `pid` runs and is the one started at `proc_start` (not a zombie)."""
    if pid is None:
        return False
    stat = process_stat(pid)
    if stat is None:
        return False
    return stat.state != "Z" and (proc_start is None or stat.start_ticks == proc_start)


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot, from /proc."""
    stat = process_stat(pid)
    return stat.start_ticks if stat is not None else None


def uptime_s(record: AppRecord) -> float | None:
    """Seconds since a running app started, None for one that is not running."""
    if record.status != "running" or record.started_at is None:
        return None
    started = datetime.fromisoformat(record.started_at.replace("Z", "+00:00"))
    return max(0.0, (datetime.now(UTC) - started).total_seconds())


def now_iso() -> str:
    """The current UTC time as ISO-8601 with a Z."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _current(workspace: Workspace, record: AppRecord) -> AppRecord:
    """`record` with its status from its process: a running app whose process is gone ended.

    An app in the host (`options.hosted`) has ended too once its exit is recorded, while the
    host, its process, runs on.
    """
    if record.status != "running":
        return record
    exit_file = workspace.app_exit(record.name)
    alive = process_alive(record.pid, record.proc_start)
    if alive and not (record.options.hosted and exit_file.is_file()):
        return record
    if exit_file.is_file():
        ended = json.loads(exit_file.read_text(encoding="utf-8"))
        status: Status = "finished" if ended.get("code") == 0 else "crashed"
        return replace(record, status=status, stopped_at=ended.get("at"))
    return replace(record, status="crashed")


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)
