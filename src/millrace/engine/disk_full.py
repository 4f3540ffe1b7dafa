"""Recognising an app stopped by a full disk, and naming the folder it could not write.

Spark reports a full disk as Java's `IOException: No space left on device` inside the
stopped query's exception (with its plan), and names no path. The app's folders, its
checkpoint, its result tables and the workspace, are looked at on their disks: the one with
the least room left is named, the most specific first when they share a disk. millrace's own
writes (driver locks, records of the app's state) fail with an `OSError` naming its file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from millrace.config.workspace import Workspace
from millrace.errors import DiskFullError

_DISK_FULL = "No space left on device"
_HINT = (
    "free space on that disk (or give the workspace a larger one), then run the app again: "
    "nothing is lost, the micro-batch it was writing was not committed, and the next run "
    "reads it again from the checkpoint"
)


def disk_full_error(failure: Exception, workspace: Workspace, app: str) -> DiskFullError | None:
    """The `DiskFullError` for `app`'s query that `failure` stopped, or None if no disk was full.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> failure = RuntimeError("java.io.IOException: No space left on device")
        >>> print(disk_full_error(failure, workspace, "clicks"))
        app 'clicks' stopped: the disk holding its workspace ... is full (... bytes free; Spark:
        No space left on device)
        >>> disk_full_error(RuntimeError("java.lang.OutOfMemoryError"), workspace, "clicks") is None
        True
    """
    if _DISK_FULL not in str(failure):
        return None
    folders = [
        ("checkpoint folder", workspace.app_checkpoints(app)),
        ("result table folder", workspace.app_tables(app)),
        ("workspace", workspace.root),
    ]
    # One folder per disk, the most specific: comparing the free bytes of folders on one disk
    # would name whichever was looked at while another writer freed or took some room.
    by_disk: dict[int, tuple[str, Path]] = {}
    for what, folder in folders:
        if isinstance(folder, Path) and folder.is_dir():
            by_disk.setdefault(folder.stat().st_dev, (what, folder))
    free, what, folder = min(
        ((_free_bytes(folder), what, folder) for what, folder in by_disk.values()),
        key=lambda found: found[0],
    )
    return DiskFullError(
        f"app {app!r} stopped: the disk holding its {what} {folder} is full ({free:,} bytes "
        f"free; Spark: {_DISK_FULL})",
        hint=_HINT,
    )


def disk_full_on_write(error: OSError, workspace: Workspace) -> DiskFullError | None:
    """The `DiskFullError` for a write of millrace's own that found its disk full, or None.

    Python names the file only when opening it failed; otherwise the workspace's folder with
    the least room left is named.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> error = OSError(errno.ENOSPC, "No space left on device")
        >>> print(disk_full_on_write(error, workspace))
        the disk holding ... is full (... bytes free): No space left on device
    """
    if error.errno != errno.ENOSPC:
        return None
    if error.filename:
        path = Path(error.filename)
        existing = next(folder for folder in (path, *path.parents) if folder.exists())
        free = _free_bytes(existing)
    else:
        folders = [folder for folder in workspace.root.iterdir() if folder.is_dir()]
        free, path = min((_free_bytes(folder), folder) for folder in [workspace.root, *folders])
    return DiskFullError(
        f"the disk holding {path} is full ({free:,} bytes free): {error.strerror}",
        hint="free space on that disk (or give the workspace a larger one), then give the "
        "command again",
    )


def _free_bytes(folder: Path) -> int:
    disk = os.statvfs(folder)
    return disk.f_bavail * disk.f_frsize
