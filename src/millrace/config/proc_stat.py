"""Processes as Linux's /proc tells them: state, parent, start time, and CPU time used.

`process_stat` is millrace's one reader of `/proc/<pid>/stat`: the registry asks it whether
an app's process still runs and when it started, `local_processes` whether a server is a
zombie. `tree_cpu_seconds` adds up the CPU time a process and its descendants used, as an
app's driver measures itself (`millrace.ops.driver_cpu`): its Python process, the Spark JVM
that PySpark starts as its child, and the Python workers that JVM forks.
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
    ended and that it waited for (with theirs, recursively).

    Example:
        >>> stat = process_stat(os.getpid())
        >>> stat.state in "RS", stat.ppid == os.getppid(), stat.cpu_s > 0
        (True, True, True)
    """

    pid: int
    state: str
    ppid: int
    pgrp: int
    cpu_s: float
    children_cpu_s: float
    start_ticks: int


def process_stat(pid: int) -> ProcessStat | None:
    """Process `pid` as `/proc/<pid>/stat` has it now, or None when there is no such process."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return ProcessStat(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        # utime, stime, cutime and cstime are fields 14 to 17, in clock ticks.
        cpu_s=(int(fields[11]) + int(fields[12])) / tick,
        children_cpu_s=(int(fields[13]) + int(fields[14])) / tick,
        start_ticks=int(fields[19]),
    )


def tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds (user and system) that process `pid` and its descendants used so far.

    Counted: each process of the tree now, zombies included, for its own time; and, in each
    one's children's time, the processes of the tree that ended and were waited for (so
    each ended process once, by the parent that reaped it). Not counted: a descendant that
    left the tree before it ended (a daemon that detached, an orphan adopted by init), and a
    process that ended between the look at it and the look at its parent (that reading is
    short of it, the next is not). 0.0 when `pid` is gone.

    Example:
        >>> tree_cpu_seconds(os.getpid()) >= process_stat(os.getpid()).cpu_s
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
    if root is None:
        return 0.0
    total, waiting = 0.0, [root]
    while waiting:
        stat = waiting.pop()
        total += stat.cpu_s + stat.children_cpu_s
        waiting.extend(children.get(stat.pid, []))
    return total
