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
from millrace.errors import ConfigError

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


def free_loopback_ports(count: int) -> int:
    """The first of `count` consecutive loopback ports free now, for a bus of several nodes.

    Example:
        >>> first = free_loopback_ports(6)
        >>> all(loopback_port_is_free(port) for port in range(first, first + 6))
        True
    """
    for first in range(21_000, 60_000, count):
        if all(loopback_port_is_free(port) for port in range(first, first + count)):
            return first
    raise ConfigError(
        f"no {count} consecutive loopback ports between 21000 and 60000 are free",
        hint="stop the servers that hold them, or choose the ports in millrace.toml",
    )


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
    stop_processes([pid], grace_s)


def stop_processes(pids: list[int], grace_s: float) -> None:
    """Ask all of `pids` to stop at once; kill those still running after `grace_s`.

    At once, because some stop only while the others run: a node of a Kafka bus of several
    hands its buckets over to the nodes still up, and the last node left waits for a quorum.

    Example:
        >>> import subprocess
        >>> sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
        >>> stop_processes([sleeper.pid for sleeper in sleepers], grace_s=5.0)
        >>> [live_command_line(sleeper.pid) for sleeper in sleepers]
        [None, None]
    """
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for pid in pids:
        if not _wait_for_exit(pid, max(0.0, deadline - time.monotonic())):
            os.kill(pid, signal.SIGKILL)
            _wait_for_exit(pid, _KILL_WAIT_S)


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    # Looks at least once, so that a process stopped meanwhile counts even with no time left.
    deadline = time.monotonic() + timeout_s
    while not _exited(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _exited(pid: int) -> bool:
    try:
        # Reaps the process when this one started it, so that it leaves no zombie.
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return True
    except ChildProcessError:
        pass
    return not Path(f"/proc/{pid}").exists() or _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is None or stat.state == "Z"
