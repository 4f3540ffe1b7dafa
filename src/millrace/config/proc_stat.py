"""Processes as Linux's /proc tells them: state, parent, start time, CPU time and memory used.

`process_stat` is millrace's one reader of `/proc/<pid>/stat`: the registry asks it whether
an app's process still runs and when it started, `local_processes` whether a server is a
zombie; `thread_cpu_s` reads one thread's CPU time, as the host counts each app's.
`process_tree` reads a process and its descendants, `resident_mib` the memory such a tree
holds, and `cpu_used_between` the CPU time it used from one reading to the next, as an app's
driver measures itself (`millrace.ops.driver_cpu`): its Python process, the Spark JVM that
PySpark starts as its child, and the Python workers that JVM forks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessStat:
    """One process as `/proc/<pid>/stat` has it.

    `state` is its one-letter state (`R`, `S`, `Z` for a zombie...); `start_ticks` when it
    started, in clock ticks since boot, which tells a recycled pid from the process; `cpu_s`
    the user and system CPU seconds it used; `children_cpu_s` those of its children that
    ended and that it waited for (with theirs, recursively); `rss_bytes` its resident memory.

    Example:
        >>> stat = process_stat(os.getpid())
        >>> stat.state in "RS", stat.ppid == os.getppid(), stat.cpu_s > 0
        (True, True, True)
    """

    pid: int
    state: str
    ppid: int
    cpu_s: float
    children_cpu_s: float
    start_ticks: int
    rss_bytes: int


def process_stat(pid: int) -> ProcessStat | None:
    """Process `pid` as `/proc/<pid>/stat` has it now, or None when there is no such process."""
    fields = _stat_fields(_PROC / str(pid) / "stat")
    if fields is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return ProcessStat(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        # utime, stime, cutime and cstime are fields 14 to 17, in clock ticks.
        cpu_s=(int(fields[11]) + int(fields[12])) / tick,
        children_cpu_s=(int(fields[13]) + int(fields[14])) / tick,
        start_ticks=int(fields[19]),
        # rss, field 24, in pages.
        rss_bytes=int(fields[21]) * os.sysconf("SC_PAGE_SIZE"),
    )


def thread_cpu_s(pid: int, thread_id: int) -> float:
    """The user and system CPU seconds thread `thread_id` (a native id) of `pid` used; 0 if gone.

    Example:
        >>> import threading
        >>> thread_cpu_s(os.getpid(), threading.get_native_id()) > 0
        True
    """
    fields = _stat_fields(_PROC / str(pid) / "task" / str(thread_id) / "stat")
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a `stat` file from the third (state) on; None when it is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return text[text.rindex(")") + 2 :].split()


def process_tree(pid: int) -> list[ProcessStat]:
    """Process `pid` and its descendants now, `pid` first; [] when it is gone.

    Example:
        >>> [stat.pid for stat in process_tree(os.getpid())][:1] == [os.getpid()]
        True
    """
    children: dict[int, list[ProcessStat]] = {}
    root = None
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = process_stat(int(entry.name))
        if stat is None:
            # It ended while /proc was listed.
            continue
        if stat.pid == pid:
            root = stat
        children.setdefault(stat.ppid, []).append(stat)
    tree, waiting = [], [root] if root is not None else []
    while waiting:
        stat = waiting.pop()
        tree.append(stat)
        waiting.extend(children.get(stat.pid, []))
    return tree


def resident_mib(tree: list[ProcessStat]) -> float:
    """The resident memory of a `process_tree` reading, in MiB: what its processes hold now.

    Example:
        >>> resident_mib(process_tree(os.getpid())) > 1
        True
    """
    return sum(stat.rss_bytes for stat in tree) / 2**20


def cpu_used_between(before: list[ProcessStat], after: list[ProcessStat]) -> float:
    """The CPU seconds (user and system) a process tree used from one reading to a later one.

    `before` and `after` are `process_tree` readings of one tree; `[]` for `before` counts
    all that the tree used so far. A process in both readings counts its own time since, and
    its children's that ended and that it waited for. One new in `after` counts whole (it
    started since). One gone since counts up to `before`, and whole when its parent waited
    for it: its parent's children's time then holds all of it, and the part `before` had is
    taken off, so nothing is counted twice.

    Not counted: the time since `before` of a process that ended under a parent that does
    not wait for it (PySpark's worker daemon ignores SIGCHLD, and the kernel then reaps its
    workers adding little or none of their time to its own), of one that left the tree (a
    daemon that detached), and of one that began and ended between the readings unwaited for.

    Example:
        >>> tree = process_tree(os.getpid())
        >>> cpu_used_between(tree, tree), cpu_used_between([], tree) >= tree[0].cpu_s
        (0.0, True)
    """
    was = {(stat.pid, stat.start_ticks): stat for stat in before}
    now = {(stat.pid, stat.start_ticks) for stat in after}
    gone_per_parent: dict[int, float] = {}
    for key, stat in was.items():
        if key not in now:
            gone_per_parent[stat.ppid] = (
                gone_per_parent.get(stat.ppid, 0.0) + stat.cpu_s + stat.children_cpu_s
            )
    used = 0.0
    for stat in after:
        earlier = was.get((stat.pid, stat.start_ticks))
        if earlier is None:
            used += stat.cpu_s + stat.children_cpu_s
            continue
        grown = stat.children_cpu_s - earlier.children_cpu_s
        counted_before = min(grown, gone_per_parent.get(stat.pid, 0.0))
        used += stat.cpu_s - earlier.cpu_s + grown - counted_before
    return used
