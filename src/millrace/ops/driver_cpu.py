"""What an app's driver costs: the CPU seconds it used in the last minute, as it records them.

An app's driver (`millrace run` in a terminal, or the process `deploy` starts) runs
`recording` for as long as it lives: every `SAMPLE_EVERY_S` seconds a thread reads the
driver's process tree (`millrace.config.proc_stat`: its Python process, the Spark JVM
PySpark starts, the Python workers Spark forks), adds the CPU time it used since the last
sample (`cpu_used_between`, which says what is counted), and writes the CPU used over the
last minute to `<workspace>/apps/<app>/driver_cpu.json`. For a driver younger than a minute
it is the CPU since the first sample, taken as the driver starts, so the Python
interpreter's own start (a second or two) is left out. `last_minute` reads it for
`ps`, `top`, `/metrics` and the dashboard (`millrace.monitor.status`).

An app in the host (`millrace.ops.host`) shares its process with the host's other apps: the
host runs `recording_host`, which writes each app's file with what the app used on its own
and its share of what the apps use together (`recording_host` says how).

The file goes when the driver ends; a driver killed leaves it, and a reading older than
`STALE_SAMPLES` samples counts as none. A driver that cannot write it goes on, and says so in
its log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from millrace.config.proc_stat import cpu_used_between, process_tree
from millrace.config.workspace import Workspace

SAMPLE_EVERY_S = 5.0
"""How often a driver reads its CPU time and writes the last minute's."""
WINDOW_S = 60.0
"""The span of the figure: the last minute."""
STALE_SAMPLES = 4
"""A reading older than this many sampling periods is taken for a driver that is gone."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DriverCpu:
    """The CPU seconds (user and system) an app's driver used over the last `span_s` seconds.

    `span_s` is a minute (up to one sampling period more), or less for a driver younger
    than that; `at_ms` is when the reading was taken (epoch milliseconds).

    Example:
        >>> cpu = DriverCpu(cpu_s=4.5, span_s=60.0, at_ms=1_767_225_600_000)
        >>> cpu.cores, cpu.described
        (0.075, '4.5s (8%)')
    """

    cpu_s: float
    span_s: float
    at_ms: int

    @property
    def cores(self) -> float:
        """The share of one core the driver kept busy over the span (1.0: a whole core)."""
        return self.cpu_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def described(self) -> str:
        """The CPU seconds and, in parentheses, the share of one core, as `ps` and `top` show it."""
        return f"{self.cpu_s:.1f}s ({self.cores:.0%})"


@contextlib.contextmanager
def recording(workspace: Workspace, app: str, *, every_s: float = SAMPLE_EVERY_S) -> Iterator[None]:
    """Record, every `every_s` seconds until the `with` ends, the CPU this process tree used.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> with recording(workspace, "top_events"):
        ...     pass  # the app's queries run here
        >>> last_minute(workspace, "top_events") is None  # the driver ended: no reading
        True
    """
    path = workspace.driver_cpu(app)
    try:
        with _sampling(f"millrace-driver-cpu-{app}", lambda stop: _record(path, every_s, stop)):
            yield
    finally:
        path.unlink(missing_ok=True)


def last_minute(workspace: Workspace, app: str, *, now_ms: int | None = None) -> DriverCpu | None:
    """The CPU app `app`'s driver last recorded, or None without a recent reading.

    Example:
        >>> last_minute(Workspace.locate({"MILLRACE_HOME": str(tmp_path)}), "top_events") is None
        True
    """
    now_ms = now_ms or int(time.time() * 1000)
    try:
        given = json.loads(workspace.driver_cpu(app).read_text(encoding="utf-8"))
        cpu = DriverCpu(float(given["cpu_s"]), float(given["span_s"]), int(given["at_ms"]))
        stale_ms = STALE_SAMPLES * float(given["every_s"]) * 1000
    except (OSError, KeyError, TypeError, ValueError):
        # None yet, gone, or being replaced by a driver that writes another version of it.
        return None
    return cpu if now_ms - cpu.at_ms <= stale_ms else None


@contextlib.contextmanager
def _sampling(name: str, sample: Callable[[threading.Event], None]) -> Iterator[None]:
    """`sample(stop)` on a thread of its own (named `name`) until the `with` ends."""
    stop = threading.Event()
    thread = threading.Thread(target=sample, args=(stop,), name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _record(path: Path, every_s: float, stop: threading.Event) -> None:
    """Sample this process tree's CPU until `stop`; write the last minute's after each sample."""
    pid = os.getpid()
    minute = _LastMinute()
    then, tree = time.monotonic(), process_tree(pid)
    while not stop.wait(every_s):
        now, later = time.monotonic(), process_tree(pid)
        minute.add(then, now, cpu_used_between(tree, later))
        then, tree = now, later
        try:
            _write(path, minute.reading(now, every_s, pid))
        except OSError as error:
            _log.warning("the driver's CPU was not recorded in %s: %s", path, error)


@contextlib.contextmanager
def recording_host(
    workspace: Workspace,
    own_cpu_s: Callable[[], Mapping[str, float]],
    *,
    every_s: float = SAMPLE_EVERY_S,
) -> Iterator[None]:
    """Record, for each app of this host until the `with` ends, its CPU of the last minute.

    `own_cpu_s` gives the CPU seconds each running app used so far on its own (its thread,
    its tasks, its micro-batch loops; `millrace.ops.host`). What the host's process tree used
    besides (its JIT compilers and garbage collector, the Python workers that all apps'
    tasks share, the listener bus) is divided among the apps in proportion to their own
    CPU in the same interval, so that the apps' figures add up to the host's. An app's file
    goes when it no longer runs.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> with recording_host(workspace, lambda: {"top_events": 0.0}):
        ...     pass  # the host runs its apps here
        >>> last_minute(workspace, "top_events") is None  # the host ended: no reading
        True
    """
    written: set[str] = set()
    try:
        with _sampling(
            "millrace-host-cpu",
            lambda stop: _record_host(workspace, own_cpu_s, every_s, stop, written),
        ):
            yield
    finally:
        for app in written:
            workspace.driver_cpu(app).unlink(missing_ok=True)


def _record_host(
    workspace: Workspace,
    own_cpu_s: Callable[[], Mapping[str, float]],
    every_s: float,
    stop: threading.Event,
    written: set[str],
) -> None:
    """Sample the host's and its apps' CPU until `stop`; write each app's after each sample."""
    pid = os.getpid()
    minutes: dict[str, _LastMinute] = {}
    then, tree, own = time.monotonic(), process_tree(pid), dict(own_cpu_s())
    while not stop.wait(every_s):
        try:
            own_now = dict(own_cpu_s())
        except Exception as error:  # the JVM's answer lost (it may be ending): skip the sample
            _log.warning("the host's apps' CPU was not read: %s", error)
            continue
        now, later = time.monotonic(), process_tree(pid)
        # An app that started since the last sample counts from this one.
        used = {app: max(0.0, cpu_s - own.get(app, cpu_s)) for app, cpu_s in own_now.items()}
        shared = max(0.0, cpu_used_between(tree, later) - sum(used.values()))
        for app, cpu_s in _with_shares(used, shared).items():
            minute = minutes.setdefault(app, _LastMinute())
            minute.add(then, now, cpu_s)
            try:
                _write(workspace.driver_cpu(app), minute.reading(now, every_s, pid))
                written.add(app)
            except OSError as error:
                _log.warning("%s's CPU was not recorded: %s", app, error)
        for app in set(minutes) - set(own_now):
            del minutes[app]
            workspace.driver_cpu(app).unlink(missing_ok=True)
            written.discard(app)
        then, tree, own = now, later, own_now


def _with_shares(used: Mapping[str, float], shared: float) -> dict[str, float]:
    """Each app's CPU with its part of `shared`: in proportion to what it used, else evenly.

    Example:
        >>> _with_shares({"a": 3.0, "b": 1.0}, 2.0)
        {'a': 4.5, 'b': 1.5}
    """
    total = sum(used.values())
    if total > 0:
        return {app: cpu_s + shared * cpu_s / total for app, cpu_s in used.items()}
    return {app: shared / len(used) for app in used}


class _LastMinute:
    """The CPU seconds of the intervals between samples that the last minute holds."""

    def __init__(self) -> None:
        # (monotonic start, CPU seconds) of each interval between two samples.
        self._intervals: deque[tuple[float, float]] = deque()

    def add(self, start: float, now: float, cpu_s: float) -> None:
        """The interval from `start` to `now` used `cpu_s`; those older than a minute go."""
        self._intervals.append((start, cpu_s))
        while len(self._intervals) > 1 and self._intervals[0][0] < now - WINDOW_S:
            self._intervals.popleft()

    def reading(self, now: float, every_s: float, pid: int) -> dict[str, float]:
        """The reading `last_minute` reads back, as the driver of `pid` writes it."""
        return {
            "cpu_s": round(sum(cpu_s for _, cpu_s in self._intervals), 3),
            "span_s": round(now - self._intervals[0][0], 3),
            "at_ms": int(time.time() * 1000),
            "every_s": every_s,
            "pid": pid,
        }


def _write(path: Path, reading: dict[str, float]) -> None:
    # Written whole and renamed, as the registry's files are: a reader never sees half.
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_text(json.dumps(reading), encoding="utf-8")
    temporary.replace(path)
