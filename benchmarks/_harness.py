"""What every benchmark shares: a workspace and broker of its own, the machine's facts, results.

A benchmark runs on free loopback ports in a temporary workspace that it removes at the end,
and records its figures with the machine and the command under benchmarks/results/.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


@contextmanager
def isolated_workspace() -> Iterator[Path]:
    """A fresh initialized workspace, its broker and Redis up, in MILLRACE_* for every client."""
    home = Path(tempfile.mkdtemp(prefix="millrace-bench-"))
    os.environ.update(
        {
            "MILLRACE_HOME": str(home),
            "MILLRACE_KAFKA_PORT": str(free_port()),
            "MILLRACE_KAFKA_CONTROLLER_PORT": str(free_port()),
            "MILLRACE_REDIS_PORT": str(free_port()),
        }
    )
    os.environ.pop("MILLRACE_KAFKA", None)
    os.environ.pop("MILLRACE_REDIS", None)
    cli("init")
    cli("up")
    try:
        yield home
    finally:
        cli("down")
        shutil.rmtree(home, ignore_errors=True)


@dataclass(frozen=True)
class Run:
    """One side's run of a workload: wall-clock seconds from start to stop, seconds spent in
    micro-batches, and where its output went (a table's path or a stream's name)."""

    wall_s: float
    processing_s: float
    output: str


def processing_seconds(query) -> float:
    """Seconds a streaming query spent in its micro-batches, as Spark reports them."""
    batches = query.recentProgress
    return sum(progress["durationMs"]["triggerExecution"] for progress in batches) / 1000


def cli(
    *arguments: str, stdin: str | None = None, environment: dict[str, str] | None = None
) -> None:
    """Run a millrace command as a user would, failing the benchmark if it fails.

    `environment` adds variables to the command's environment, such as a MILLRACE_* setting.
    """
    subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", *arguments],
        input=stdin,
        text=True,
        check=True,
        stdout=subprocess.DEVNULL,
        env=None if environment is None else {**os.environ, **environment},
    )


def cli_json(*arguments: str) -> list[dict]:
    """The JSON objects a millrace command prints with `--json`, one a line."""
    printed = subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", *arguments, "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [json.loads(line) for line in printed.splitlines() if line.strip()]


_LAG = re.compile(r"^\d+ records, ([\d.]+)s$")
"""How `millrace ps --json` shows a processing lag."""


def sample_lags(until: float, every_s: float) -> dict[str, list[float]]:
    """Each app's processing lag in seconds, from `millrace ps --json` every `every_s` until
    `until` (a `time.monotonic()`), by app."""
    lags: dict[str, list[float]] = {}
    while time.monotonic() < until:
        try:
            rows = cli_json("ps")
        except subprocess.CalledProcessError as failed:
            # A `ps` that fails (the bus slow to answer on a busy machine) is a sample missed,
            # not the end of an hour's run.
            print(f"millrace ps failed, a sample missed: {failed.stderr}", file=sys.stderr)
            rows = []
        for row in rows:
            lag = _LAG.search(str(row.get("processing_lag")))
            if lag is not None:
                lags.setdefault(row["app"], []).append(float(lag[1]))
        time.sleep(max(0.0, min(every_s, until - time.monotonic())))
    return lags


def write_results(name: str, results: dict[str, object]) -> Path:
    """Save `results` with the machine and the command as `results/<name>-<time>.json`."""
    recorded = {
        "machine": _machine(),
        "versions": _versions(),
        "command": " ".join(sys.argv),
        **results,
    }
    output = RESULTS / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    output.write_text(json.dumps(recorded, indent=2) + "\n")
    print(json.dumps(recorded, indent=2))
    print(f"written to {output}")
    return output


def produce(producer, stream: str, value: bytes, record_id: str, bucket: int | None = None) -> None:
    """Hand one record to a confluent-kafka producer, waiting for room in its queue when full.

    `bucket` sends it to that bucket rather than where the producer would.
    """
    placed = {} if bucket is None else {"partition": bucket}
    while True:
        try:
            producer.produce(stream, value, headers={"id": record_id}, **placed)
            return
        except BufferError:
            producer.poll(0.1)


def buckets_of(producer, stream: str) -> list[int]:
    """The bucket numbers of `stream`. A closing record goes to each: a millrace input's
    watermark is the least over its buckets."""
    return sorted(producer.list_topics(stream, timeout=10).topics[stream].partitions)


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) that process `pid` has used so far, from /proc/<pid>/stat."""
    fields = _stat_fields(pid)
    # utime and stime, the 14th and 15th fields, in clock ticks.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_group(group: int) -> list[int]:
    """The live processes of process group `group` (a deployed app's driver leads one)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int(_stat_fields(int(entry.name))[2]) == group:
                members.append(int(entry.name))
        except OSError:
            continue  # ended while listed
    return members


def group_cpu_seconds(group: int) -> dict[int, float]:
    """CPU seconds (user and system) of each live process of process group `group`."""
    found = {}
    for pid in process_group(group):
        try:
            found[pid] = cpu_seconds(pid)
        except OSError:
            continue  # ended since it was listed
    return found


def batches_started(apps: list[str]) -> int:
    """The micro-batches the queries of `apps` have started so far (`millrace history`).

    Counted from each query's newest batch id, not from the batches listed: Spark keeps only
    the last 100 of a query's batches in its log, so a count of them stops growing.
    """
    newest: dict[tuple[str, str], int] = {}
    for app in apps:
        for batch in cli_json("history", app):
            query = (app, batch["query"])
            newest[query] = max(newest.get(query, -1), batch["batch"])
    return sum(batch_id + 1 for batch_id in newest.values())


def group_thread_cpu_seconds(group: int) -> dict[str, float]:
    """CPU seconds of the live threads of process group `group`, by kind of thread.

    A kind is the process's command and the thread's name with its digits dropped, as Linux
    keeps them (15 characters): `java/C2 CompilerThre`, `java/stream executio`,
    `python3/python3`... Threads that ended since are not counted.
    """
    found: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in process_group(group):
        try:
            command = Path(f"/proc/{pid}/comm").read_text().strip()
            for task in Path(f"/proc/{pid}/task").iterdir():
                text = (task / "stat").read_text()
                name = text[text.index("(") + 1 : text.rindex(")")]
                fields = text.rsplit(")", 1)[1].split()
                kind = f"{command}/{''.join(c for c in name if not c.isdigit()).rstrip('#- ')}"
                found[kind] = found.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue  # ended while listed
    return found


def group_rss_mib(group: int) -> float:
    """Resident memory of the live processes of process group `group`, in MiB."""
    pages = 0
    for pid in process_group(group):
        try:
            pages += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except OSError:
            continue  # ended since it was listed
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two `group_cpu_seconds` readings.

    A process that ended meanwhile is left out; one that began meanwhile counts whole.
    """
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def machine_cpu_seconds() -> tuple[float, float]:
    """Busy and idle CPU seconds of all cores since boot, from the `cpu` line of /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:8]]
    user, nice, system, idle, iowait, irq, softirq = fields
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, (idle + iowait) / tick


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command's name: state, ppid, pgrp, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _versions() -> dict[str, str | None]:
    """What ran: millrace's commit (`-dirty` with uncommitted changes), packages, Kafka."""
    from millrace.config.jvm import jars
    from millrace.config.settings import Settings

    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=RESULTS
    ).stdout.strip()
    versions: dict[str, str | None] = {"millrace": commit or None}
    for package in ("pyspark", "delta-spark", "confluent-kafka", "redis", "bytewax"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    server = "kafka-server-"
    found = [jar.stem for jar in jars(Settings(), "kafka") if jar.stem.startswith(server)]
    versions["kafka"] = found[0].removeprefix(server) if found else None
    return versions


def _machine() -> dict[str, object]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "java": java.splitlines()[0] if java else "unknown",
        "platform": platform.platform(),
    }
