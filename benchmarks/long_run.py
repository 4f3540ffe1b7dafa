"""An hour of the demo pipeline: memory, lag, micro-batches and files over time.

Run it with `.venv/bin/python benchmarks/long_run.py [--warm-up-s W] [--measure-s M]
[--slice-s S] [--rate R]` after `make setup`, on a machine doing nothing else. It runs
`millrace demo` (four apps in the workspace's host, R events a second, 200 by default) in a
workspace of its own and, after W seconds (300 by default), measures it for M seconds (3,600
by default):

- per slice of S seconds (600 by default), under `long_run`: the cores the host's process
  group used (its Python driver, Spark JVM and Python workers, from /proc), its resident
  memory at the slice's end, and its queries' micro-batches per minute;
- each app's processing lag (`millrace ps --json`, every 10 seconds) in the first slice and
  in the last, under `long_run_lags`: steady lag is the two alike;
- under `long_run_files`, what can grow with time, at the start and at the end, in MiB: the
  resident memory of the host's JVM, of its Python driver and of its Python workers; and the
  sizes on disk of the checkpoints, the apps' logs, the host's log, millrace's internal
  streams (`_millrace.*`: metrics, ticks, wake-ups) and the dead-letter streams in the
  broker's folder.

It reads the apps through `millrace ps --json` and `millrace history --json` only.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import (
    batches_started,
    cli_json,
    cpu_spent,
    group_cpu_seconds,
    group_rss_mib,
    isolated_workspace,
    process_group,
    sample_lags,
    write_results,
)

LAG_EVERY_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm-up-s", type=float, default=300.0, help="Seconds before measuring.")
    parser.add_argument("--measure-s", type=float, default=3600.0, help="Seconds measured.")
    parser.add_argument("--slice-s", type=float, default=600.0, help="Seconds per slice.")
    parser.add_argument("--rate", type=float, default=200.0, help="Events per second.")
    arguments = parser.parse_args()
    # The demo is stopped with Ctrl-C's signal, which a shell's `cmd &` would leave ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with isolated_workspace() as home:
        log = (home / "demo.log").open("w")
        demo = subprocess.Popen(
            [sys.executable, "-m", "millrace.cli.main", "demo", "--rate", f"{arguments.rate:g}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            time.sleep(arguments.warm_up_s)
            if demo.poll() is not None:
                printed = (home / "demo.log").read_text()[-2000:]
                raise SystemExit(f"the demo ended early; its last lines:\n{printed}")
            tables = _measure(home, arguments.measure_s, arguments.slice_s)
        finally:
            os.killpg(demo.pid, signal.SIGINT)
            demo.wait(timeout=120)
            log.close()
    write_results(
        "long-run",
        {
            "warm_up_s": arguments.warm_up_s,
            "measure_s": arguments.measure_s,
            "slice_s": arguments.slice_s,
            "rate": arguments.rate,
            **tables,
        },
    )


def _measure(home: Path, measure_s: float, slice_s: float) -> dict[str, dict]:
    """The three tables of the module's docstring, measured over `measure_s` seconds."""
    apps = [row["app"] for row in cli_json("ps")]
    [host] = {row["pid"] for row in cli_json("ps") if row.get("pid")}
    files_at_start = _files_mib(home, host)
    slices: dict[str, dict[str, float]] = {}
    lags: list[dict[str, list[float]]] = []
    started = time.monotonic()
    while time.monotonic() - started < measure_s - 1:
        cpu_before, batches_before = group_cpu_seconds(host), batches_started(apps)
        slice_start = time.monotonic()
        ending = min(slice_start + slice_s, started + measure_s)
        seen = sample_lags(ending, LAG_EVERY_S)
        seconds = time.monotonic() - slice_start
        first_minute = round((slice_start - started) / 60)
        slices[f"minutes {first_minute}-{round((time.monotonic() - started) / 60)}"] = {
            "cores_used": cpu_spent(cpu_before, group_cpu_seconds(host)) / seconds,
            "rss_mib": group_rss_mib(host),
            "batches_per_minute": (batches_started(apps) - batches_before) / (seconds / 60),
        }
        lags.append(seen)
    files_at_end = _files_mib(home, host)
    lag_table = {
        f"{app} ({when})": {
            "median_lag_s": statistics.median(seen[app]),
            "max_lag_s": max(seen[app]),
        }
        for when, seen in (("first slice", lags[0]), ("last slice", lags[-1]))
        for app in sorted(seen)
    }
    files = {
        what: {"start_mib": files_at_start[what], "end_mib": files_at_end[what]}
        for what in files_at_start
    }
    return {"long_run": slices, "long_run_lags": lag_table, "long_run_files": files}


def _files_mib(home: Path, host: int) -> dict[str, float]:
    """The resident memory of the host's processes by kind, and the sizes of what can grow."""
    memory = {"host JVM": 0.0, "host Python driver": 0.0, "host Python workers": 0.0}
    page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
    for pid in process_group(host):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page_mib
        except OSError:
            continue  # ended while listed
        if pid == host:
            memory["host Python driver"] += resident
        elif "java" in command.split(" ", 1)[0]:
            memory["host JVM"] += resident
        else:
            memory["host Python workers"] += resident
    kafka = home / "kafka" / "data"
    sizes = {
        "checkpoints": _size_mib(home / "checkpoints"),
        "apps' logs": sum(_size_mib(log) for log in (home / "apps").glob("*/app.log*")),
        "host's log": sum(_size_mib(log) for log in (home / "host").glob("host.log*")),
        "internal streams": sum(_size_mib(topic) for topic in kafka.glob("_millrace.*")),
        "dead-letter streams": sum(_size_mib(topic) for topic in kafka.glob("*.dlq-*")),
    }
    return {what: round(mib, 2) for what, mib in (memory | sizes).items()}


def _size_mib(path: Path) -> float:
    """The bytes of the files at or under `path`, in MiB; 0 when it does not exist."""
    if path.is_file():
        return path.stat().st_size / 2**20
    total = 0
    for file in path.rglob("*"):
        try:
            total += file.stat().st_size if file.is_file() else 0
        except OSError:
            continue  # removed while listed
    return total / 2**20


if __name__ == "__main__":
    main()
