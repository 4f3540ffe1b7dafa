"""How the CLI reaches the host: requests left in its inbox, and the host found or started.

The host (`millrace.ops.host`) is one process per workspace that runs deployed apps in one
Spark application. Its folder, `<workspace>/host/`, holds:

- `host.lock`, an exclusive `flock` the host holds for as long as it lives, so that a
  workspace has one host; the kernel drops it however the host ends;
- `host.json`, what the host is (pid, process start, Spark master, start time), believed
  only while the lock is held;
- `host.log`, its output: its own lines and Spark's;
- `inbox/`, one JSON file per request (`start` or `stop` an app), which the host reads in
  the order they came and deletes once read. A request is written whole under a temporary
  name and renamed, so the host never reads half of one, and a CLI that dies mid-command
  leaves a whole request or none.

`start_host` starts the host, under its supervisor (`millrace.ops.host.supervise`), when none
runs and waits until it has taken its lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Literal

from millrace.apps.options import RunOptions
from millrace.config.workspace import Workspace
from millrace.errors import LifecycleError
from millrace.ops import registry
from millrace.ops.driver_lock import StartedBy, is_held

HOST_MODULE = "millrace.ops.host"
"""The module the host's supervisor runs (`python -m`), and the host itself (with `--serve`)."""

HOST_START_WAIT_S = 60.0
"""How long `start_host` waits for a host it started to take its lock."""

_LOOK_EVERY_S = 0.1

Verb = Literal["start", "stop"]


@dataclass(frozen=True)
class HostRequest:
    """What the CLI asks of the host: start an app (its source, options, folder) or stop one.

    Example:
        >>> request = HostRequest("stop", "top_events")
        >>> HostRequest.from_json(request.to_json()) == request
        True
    """

    verb: Verb
    app: str
    source: str = ""
    options: RunOptions = field(default_factory=RunOptions)
    cwd: str | None = None
    started_by: StartedBy = "deploy"

    def to_json(self) -> dict[str, object]:
        """The request as its inbox file holds it."""
        return {**asdict(self), "options": self.options.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> HostRequest:
        """The request `to_json` wrote; `LifecycleError` for a file that is not one."""
        verb, app, started_by = data.get("verb"), data.get("app"), data.get("started_by")
        options = data.get("options")
        if verb not in ("start", "stop") or not isinstance(app, str) or not app:
            raise LifecycleError(f"{data!r} is not a request to the host")
        by: StartedBy = "deploy"
        if started_by == "restart" or started_by == "rollback":
            by = started_by
        cwd = data.get("cwd")
        return cls(
            verb=verb,
            app=app,
            source=str(data.get("source") or ""),
            options=RunOptions.from_json(options if isinstance(options, dict) else {}),
            cwd=cwd if isinstance(cwd, str) else None,
            started_by=by,
        )


@dataclass(frozen=True)
class HostProcess:
    """A running host: its pid, its process start (clock ticks since boot), master, start time."""

    pid: int
    proc_start: int | None
    master: str
    started_at: str


def send(workspace: Workspace, request: HostRequest) -> None:
    """Leave `request` in the host's inbox, whole or not at all."""
    inbox = workspace.host_inbox
    inbox.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{request.verb}-{request.app}.json"
    temporary = inbox / f".{name}.tmp"
    temporary.write_text(json.dumps(request.to_json()) + "\n", encoding="utf-8")
    temporary.replace(inbox / name)


def take(workspace: Workspace) -> list[HostRequest | LifecycleError]:
    """The requests in the inbox, oldest first, each removed as it is read.

    A file that does not hold a request comes as the `LifecycleError` that says so, for the
    host's log: it is removed too, so that it is not read again.
    """
    inbox = workspace.host_inbox
    if not inbox.is_dir():
        return []
    taken: list[HostRequest | LifecycleError] = []
    for path in sorted(inbox.glob("[0-9]*.json")):
        try:
            taken.append(HostRequest.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (ValueError, LifecycleError) as error:
            taken.append(LifecycleError(f"request {path.name} could not be read: {error}"))
        path.unlink(missing_ok=True)
    return taken


def running_host(workspace: Workspace) -> HostProcess | None:
    """The host of `workspace` when one runs (it holds the host lock), else None."""
    return _described(workspace) if is_held(workspace.host_lock) else None


def start_host(workspace: Workspace, master: str) -> HostProcess:
    """The host of `workspace`, started when none runs; it serves the Spark master `master`.

    Raises `LifecycleError` when the running host serves another master (an app that needs
    another one runs in a driver of its own), or when a started host did not take its lock
    within `HOST_START_WAIT_S` (its log says why).
    """
    host = running_host(workspace)
    if host is None:
        host = _spawn(workspace)
    if host.master != master:
        raise LifecycleError(
            f"the host of this workspace (pid {host.pid}) runs apps on Spark master "
            f"{host.master!r}, not {master!r}",
            hint="deploy the app with --isolated for a driver of its own on that master",
        )
    return host


@contextlib.contextmanager
def holding_host_lock(workspace: Workspace, master: str) -> Iterator[HostProcess | None]:
    """In the host: take the host lock and describe this process, or yield None if held.

    The lock is let go at the end of the block (and by the kernel, however the process ends).
    """
    workspace.host_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(workspace.host_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        pid = os.getpid()
        host = HostProcess(pid, registry.process_start(pid), master, registry.now_iso())
        temporary = workspace.host_record.with_suffix(f".tmp{pid}")
        temporary.write_text(json.dumps(asdict(host), indent=2) + "\n", encoding="utf-8")
        temporary.replace(workspace.host_record)
        yield host
    finally:
        os.close(descriptor)


def _spawn(workspace: Workspace) -> HostProcess:
    log = workspace.host_log
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        output.write(f"--- {registry.now_iso()} millrace host\n".encode())
        output.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", HOST_MODULE],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MILLRACE_HOME": str(workspace.root), "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    deadline = time.monotonic() + HOST_START_WAIT_S
    while time.monotonic() < deadline:
        host = running_host(workspace)
        if host is not None:
            return host
        if process.poll() is not None and running_host(workspace) is None:
            break
        time.sleep(_LOOK_EVERY_S)
    raise LifecycleError(
        f"the host did not start (pid {process.pid})",
        hint=f"its log, {log}, says why",
    )


def _described(workspace: Workspace) -> HostProcess | None:
    """The host `host.json` names, if its process runs (not one that held the lock before)."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        host = HostProcess(**json.loads(workspace.host_record.read_text(encoding="utf-8")))
        if registry.process_alive(host.pid, host.proc_start):
            return host
    return None
