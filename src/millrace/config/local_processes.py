"""The workspace's local server processes, as the operating system sees them.

`millrace up` starts a Kafka broker (`millrace.bus.broker`) and a Redis
(`millrace.serving.server`) detached, each found again later by the pid file it keeps in the
workspace. What they share lives here: whether a loopback port is free, a live process's
command line, and stopping one (SIGTERM, then SIGKILL after a grace period). Each server keeps
its own checks of what a live process must be, and its own error messages.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from millrace.config.proc_stat import process_stat

_KILL_WAIT_S = 5.0


def loopback_port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` of 127.0.0.1 now.

    Example:
        >>> loopback_port_is_free(0)
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def live_command_line(pid: int) -> bytes | None:
    """The command line of process `pid`, or None when it is gone or a zombie.

    Example:
        >>> live_command_line(os.getpid()) is not None
        True
    """
    try:
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return None if _is_zombie(pid) else command_line


def stop_process(pid: int, grace_s: float) -> None:
    """Ask process `pid` to stop (SIGTERM); kill it (SIGKILL) if it still runs after `grace_s`.

    Example:
        >>> import subprocess
        >>> sleeper = subprocess.Popen(["sleep", "60"])
        >>> stop_process(sleeper.pid, grace_s=5.0)
        >>> live_command_line(sleeper.pid) is None
        True
    """
    os.kill(pid, signal.SIGTERM)
    if not _wait_for_exit(pid, grace_s):
        os.kill(pid, signal.SIGKILL)
        _wait_for_exit(pid, _KILL_WAIT_S)


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            # Reaps the process when this one started it, so that it leaves no zombie.
            finished, _ = os.waitpid(pid, os.WNOHANG)
            if finished == pid:
                return True
        except ChildProcessError:
            pass
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return True
        time.sleep(0.1)
    return False


def _is_zombie(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is None or stat.state == "Z"
