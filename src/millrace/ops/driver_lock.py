"""One driver per app: a lock that an app's driver process holds for as long as it lives.

Two drivers on one checkpoint both start, and Spark notices only once both run a batch: one
of them dies with `SparkConcurrentModificationException`, which one is a race. So the
driver of an app (`millrace run`, in the foreground or as the process `deploy` starts)
holds an exclusive `flock` on `<workspace>/apps/<app>/driver.lock` from before Spark starts
until it ends, and a second driver is refused with `AppRunningError`, naming the first.

The kernel drops the lock when the holding process ends, however it ends (killed, out of
memory, its machine restarted), so a lock never outlives its driver and needs no cleaning
by hand: there is no stale lock to break. `driver.json` beside it describes the holder
(pid, host, the verb that started it, when) for the refusal's message; it is believed only
while the lock is held, so one left behind by a killed driver is ignored. The lock file is
never deleted, and it lives in the registry's folder rather than in the checkpoint folder,
so that moving or deleting a checkpoint (`restart --fresh`) cannot take the lock away from
a running driver.

`deploy` takes the lock itself, before it starts anything, and hands it to the process it
starts (the descriptor is inherited, its number in `MILLRACE_DRIVER_LOCK_FD`), which keeps
it: the lock is never free between the check and the start.

Limits: `flock` is enforced by one machine's kernel. On a network filesystem (NFS, SMB,
some FUSE mounts), it may not be seen by other machines, so two machines running the same
app from one shared workspace are not kept apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from millrace.config.workspace import Workspace
from millrace.errors import AppRunningError
from millrace.ops.registry import now_iso

StartedBy = Literal["run", "deploy", "restart", "rollback"]

LOCK_FD_ENV = "MILLRACE_DRIVER_LOCK_FD"
"""Set by `deploy` in the started process's environment: the descriptor of the held lock."""

_WAIT_POLL_S = 0.1
# `holder` looks by taking the lock shared for an instant: a start that meets such a look
# tries again for this long before it refuses.
_MIN_WAIT_S = 1.0


@dataclass(frozen=True)
class Holder:
    """Who holds an app's driver lock: its process, machine, the verb that started it, when.

    Example:
        >>> Holder(41873, "box", "deploy", "2026-01-01T10:00:00Z", "/apps/a.sql").described
        'pid 41873 on box, started by `millrace deploy` at 2026-01-01T10:00:00Z'
    """

    pid: int
    host: str
    started_by: str
    started_at: str
    source: str | None = None

    @property
    def described(self) -> str:
        """The holder in a few words, for messages."""
        return (
            f"pid {self.pid} on {self.host}, started by `millrace {self.started_by}` "
            f"at {self.started_at}"
        )


class DriverLock:
    """An app's driver lock, held through an open descriptor until `release` or exit."""

    def __init__(self, workspace: Workspace, app: str, descriptor: int) -> None:
        self.workspace = workspace
        self.app = app
        self.descriptor = descriptor

    def describe(self, pid: int, started_by: StartedBy, source: str | None) -> Holder:
        """Write `driver.json`: the holder is process `pid`, started by `started_by`."""
        holder = Holder(pid, socket.gethostname(), started_by, now_iso(), source)
        path = self.workspace.driver_holder(self.app)
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(json.dumps(asdict(holder), indent=2) + "\n", encoding="utf-8")
        temporary.replace(path)
        return holder

    def handed_over(self) -> dict[str, str]:
        """The environment that hands this lock to a process started with `pass_fds`."""
        return {LOCK_FD_ENV: str(self.descriptor)}

    def release(self) -> None:
        """Close this process's descriptor: the lock is free unless a child inherited it."""
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1

    def __enter__(self) -> DriverLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(
    workspace: Workspace,
    app: str,
    started_by: StartedBy,
    *,
    source: str | None = None,
    wait_s: float = 0.0,
) -> DriverLock:
    """Take `app`'s driver lock for this process, waiting up to `wait_s` for it to be free.

    Raises `AppRunningError`, naming the holder, when another process holds it.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> with acquire(workspace, "top_events", "run"):
        ...     holder(workspace, "top_events").pid == os.getpid()
        True
    """
    path = workspace.driver_lock(app)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + max(wait_s, _MIN_WAIT_S)
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(descriptor)
                raise refusal(workspace, app) from None
            time.sleep(_WAIT_POLL_S)
    lock = DriverLock(workspace, app, descriptor)
    try:
        lock.describe(os.getpid(), started_by, source)
    except BaseException:
        lock.release()
        raise
    return lock


def hold(workspace: Workspace, app: str, *, source: str | None = None) -> DriverLock:
    """The lock for the driver of `app` in this process: the one `deploy` handed over, or new.

    A process started by `deploy` (`LOCK_FD_ENV` set) keeps the lock it inherited; one
    started otherwise (`millrace run` in a terminal) takes it as `run`.
    """
    handed = _handed_over(workspace, app)
    return handed if handed is not None else acquire(workspace, app, "run", source=source)


def holder(workspace: Workspace, app: str) -> Holder | None:
    """Who holds `app`'s driver lock now, or None when no process does.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> with acquire(workspace, "top_events", "deploy"):
        ...     holder(workspace, "top_events").started_by
        'deploy'
        >>> holder(workspace, "top_events") is None
        True
    """
    if not is_held(workspace.driver_lock(app)):
        return None
    return _recorded_holder(workspace, app) or Holder(0, "unknown", "run", "unknown")


def is_held(path: Path) -> bool:
    """Whether a process holds the exclusive `flock` on the file at `path` now.

    Example:
        >>> is_held(tmp_path / "no-such.lock")
        False
    """
    if not path.is_file():
        return False
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


def refusal(workspace: Workspace, app: str) -> AppRunningError:
    """The error that refuses a second driver of `app`, naming the one that holds the lock."""
    found = _recorded_holder(workspace, app)
    if found is None:
        # Its holder took the lock an instant ago and has not described itself yet.
        described, how = "a driver that started a moment ago", "`millrace ps` lists it"
    elif found.started_by == "run":
        described = found.described
        how = (
            f"stop it with Ctrl-C in its terminal, or `kill {found.pid}` (SIGTERM lets its "
            "running micro-batch finish)"
        )
    else:
        described = found.described
        how = (
            f"`millrace stop {app}` stops it; `millrace restart {app}` starts it again "
            "with new code"
        )
    return AppRunningError(
        f"app {app!r} is running already: {described}; a second driver on its "
        f"checkpoint ({workspace.app_checkpoints(app)}) would fail once data arrives",
        hint=f"{how}; the lock is {workspace.driver_lock(app)}, held by that process "
        "for as long as it lives (nothing to clean up if it dies)",
    )


def _handed_over(workspace: Workspace, app: str) -> DriverLock | None:
    text = os.environ.pop(LOCK_FD_ENV, None)
    if text is None or not text.isdigit():
        return None
    descriptor = int(text)
    path = workspace.driver_lock(app)
    try:
        given, expected = os.fstat(descriptor), os.stat(path)
    except OSError:
        return None
    if (given.st_dev, given.st_ino) != (expected.st_dev, expected.st_ino):
        return None  # a descriptor of another file, or of another app's lock
    try:
        # The lock is this process's already: taking it again on the same open file succeeds.
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None
    os.set_inheritable(descriptor, False)
    return DriverLock(workspace, app, descriptor)


def _recorded_holder(workspace: Workspace, app: str) -> Holder | None:
    """The holder `driver.json` names (the lock's holder only while the lock is held)."""
    path = workspace.driver_holder(app)
    with contextlib.suppress(OSError, ValueError, TypeError):
        return Holder(**json.loads(path.read_text(encoding="utf-8")))
    return None
