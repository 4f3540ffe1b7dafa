"""The CPU a process tree used, read from /proc: a process that burns CPU shows it, and so do
its children, those still running and those that ended and were waited for."""

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from millrace.config.proc_stat import process_stat, tree_cpu_seconds

# Burns `seconds` of its own CPU time, says so, then waits for its stdin to close.
BURN = """
import sys, time
start = time.process_time()
while time.process_time() - start < {seconds}:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""
# Runs one burner to its end (and waits for it), starts a second one, and waits with it.
PARENT = """
import subprocess, sys
burn = {burn!r}
subprocess.run([sys.executable, "-c", burn], stdin=subprocess.DEVNULL, check=True,
               stdout=subprocess.DEVNULL)
alive = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
alive.stdout.readline()
print("burnt", flush=True)
sys.stdin.read()
alive.stdin.close()
alive.wait()
"""


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts; each told to end (its stdin closed) and waited for."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        assert process.stdin is not None
        process.stdin.close()
        process.wait()


def _start(code: str, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    started.append(process)
    assert process.stdout is not None
    assert process.stdout.readline() == "burnt\n"
    return process


def test_a_process_that_burnt_a_second_of_cpu_shows_at_least_that(
    started: list[subprocess.Popen[str]],
) -> None:
    burner = _start(BURN.format(seconds=1.2), started)

    stat = process_stat(burner.pid)

    assert stat is not None and stat.ppid == os.getpid()
    assert stat.cpu_s >= 1.0
    assert tree_cpu_seconds(burner.pid) >= 1.0


def test_a_tree_counts_a_child_that_ended_and_one_that_runs(
    started: list[subprocess.Popen[str]],
) -> None:
    parent = _start(PARENT.format(burn=BURN.format(seconds=0.6)), started)

    own = process_stat(parent.pid)
    total = tree_cpu_seconds(parent.pid)

    assert own is not None
    # The ended child is in the parent's children's time, the running one is read itself.
    assert own.children_cpu_s >= 0.5
    assert total - own.cpu_s >= 1.0


def test_a_process_that_is_gone_has_no_stat_and_no_cpu() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    assert process_stat(gone.pid) is None
    assert tree_cpu_seconds(gone.pid) == 0.0
