"""The CPU a process tree used, read from /proc: a process that burns CPU shows it, and so do
its children, those running and those that ended, each once, also one that ended under a
parent that does not wait for it, as PySpark's workers do."""

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from millrace.config.proc_stat import cpu_used_between, process_stat, process_tree

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
TWO_CHILDREN = """
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
# A child burns; at the next line of stdin it ends and is waited for; then all wait.
WAITED_FOR = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {burn!r}], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print("burnt", flush=True)
sys.stdin.readline()
child.stdin.close()
child.wait()
print("reaped", flush=True)
sys.stdin.read()
"""
# As PySpark's worker daemon: SIGCHLD ignored, a forked worker burns at the first line of
# stdin and ends at the second, reaped by the kernel without a wait.
UNWAITED_FOR = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
go, went = os.pipe()
burnt, said = os.pipe()
worker = os.fork()
if worker == 0:
    os.read(go, 1)
    start = time.process_time()
    while time.process_time() - start < 0.6:
        pass
    os.write(said, b"b")
    os.read(go, 1)
    os._exit(0)
print("forked", flush=True)
sys.stdin.readline()
os.write(went, b"g")
os.read(burnt, 1)
print("burnt", flush=True)
sys.stdin.readline()
os.write(went, b"e")
while os.path.exists(f"/proc/{worker}"):
    time.sleep(0.01)
print("gone", flush=True)
sys.stdin.read()
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


def _start(code: str, started: list[subprocess.Popen[str]], says: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    started.append(process)
    _expect(process, says)
    return process


def _next(process: subprocess.Popen[str], says: str) -> None:
    """Send `process` a line, and wait until it says `says`."""
    assert process.stdin is not None
    process.stdin.write("\n")
    process.stdin.flush()
    _expect(process, says)


def _expect(process: subprocess.Popen[str], says: str) -> None:
    assert process.stdout is not None
    assert process.stdout.readline() == f"{says}\n"


def test_a_process_that_burnt_a_second_of_cpu_shows_at_least_that(
    started: list[subprocess.Popen[str]],
) -> None:
    burner = _start(BURN.format(seconds=1.2), started, "burnt")

    stat = process_stat(burner.pid)

    assert stat is not None and stat.ppid == os.getpid()
    assert stat.cpu_s >= 1.0
    assert cpu_used_between([], process_tree(burner.pid)) >= 1.0


def test_a_tree_counts_a_child_that_ended_and_one_that_runs(
    started: list[subprocess.Popen[str]],
) -> None:
    parent = _start(TWO_CHILDREN.format(burn=BURN.format(seconds=0.6)), started, "burnt")

    tree = process_tree(parent.pid)

    assert tree[0].pid == parent.pid and len(tree) == 2
    # The ended child is in the parent's children's time, the running one is read itself.
    assert tree[0].children_cpu_s >= 0.5
    assert cpu_used_between([], tree) - tree[0].cpu_s >= 1.0


def test_a_child_that_ends_and_is_waited_for_is_not_counted_again(
    started: list[subprocess.Popen[str]],
) -> None:
    parent = _start(WAITED_FOR.format(burn=BURN.format(seconds=0.6)), started, "burnt")
    before = process_tree(parent.pid)
    _next(parent, "reaped")
    after = process_tree(parent.pid)

    # Its 0.6 s moved into the parent's children's time, and were counted before already.
    assert len(before) == 2 and len(after) == 1
    assert after[0].children_cpu_s >= 0.5
    assert cpu_used_between(before, after) < 0.3


def test_a_worker_that_ends_unwaited_for_keeps_the_cpu_it_used_counted(
    started: list[subprocess.Popen[str]],
) -> None:
    daemon = _start(UNWAITED_FOR, started, "forked")
    readings = [process_tree(daemon.pid)]
    _next(daemon, "burnt")
    readings.append(process_tree(daemon.pid))
    _next(daemon, "gone")
    readings.append(process_tree(daemon.pid))

    assert [len(tree) for tree in readings] == [2, 2, 1]
    burning, ending = cpu_used_between(*readings[:2]), cpu_used_between(*readings[1:])
    # The kernel adds little or none of its time to the daemon's: a difference of the trees'
    # totals would take most of its 0.6 s off again as it ends.
    assert burning >= 0.5
    assert burning + ending >= 0.5


def test_a_process_that_is_gone_has_no_stat_and_no_tree() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    assert process_stat(gone.pid) is None
    assert process_tree(gone.pid) == []
