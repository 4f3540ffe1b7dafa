"""The workspace's local server processes: free ports, live command lines, and stopping."""

import socket
import subprocess
import sys
import time

from millrace.config.local_processes import (
    live_command_line,
    loopback_port_is_free,
    stop_process,
    stop_processes,
)

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
# A process that ignores SIGTERM, as a server stuck in its shutdown would.
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


def started(code: str) -> int:
    """The pid of a Python process running `code`, once it has said it is ready."""
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    return process.pid


def test_a_port_another_process_listens_on_is_not_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not loopback_port_is_free(port)
    assert loopback_port_is_free(port)


def test_a_stopped_process_has_no_live_command_line() -> None:
    pid = started(SLEEPER)
    assert SLEEPER.encode() in (live_command_line(pid) or b"")
    stop_process(pid, grace_s=10.0)
    assert live_command_line(pid) is None


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period() -> None:
    pid = started(STUBBORN)
    asked = time.monotonic()
    stop_process(pid, grace_s=1.0)
    assert time.monotonic() - asked >= 1.0  # SIGTERM was given its grace period first
    assert live_command_line(pid) is None


def test_processes_stopped_together_share_one_grace_period() -> None:
    # As the nodes of a local bus are stopped: the stubborn one uses up the grace period; the
    # other, not this process's child, stops on SIGTERM meanwhile.
    stubborn = started(STUBBORN)
    orphan = int(subprocess.check_output(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"]))
    asked = time.monotonic()
    stop_processes([stubborn, orphan], grace_s=1.0)
    assert time.monotonic() - asked < 1.0 + 5.0  # one grace period, not one each
    assert live_command_line(stubborn) is None
    assert live_command_line(orphan) is None
