"""What the demo pipeline costs: the machine's CPU, each driver's, memory, batches, lags.

Run it with `.venv/bin/python benchmarks/demo_cost.py [--warm-up-s W] [--measure-s M]
[--rate R] [--only WORKLOAD]` after `make setup`, on a machine doing nothing else. It runs
`millrace demo` (four deployed apps, R events a second, 200 by default) three times, each in
a workspace of its own: `demo_isolated` with `--isolated` (each app a Spark application of
its own, the baseline), `demo` (all four in the workspace's host), and
`demo_codegen_cache_100`, the host with Spark's own cache of 100 generated classes
(`spark.codegen_cache`, 2000 in millrace). After W seconds, once
the apps have started and their first windows have closed, it measures for M seconds:

- each app's processing lag (`millrace ps --json`, every 5 seconds): its median and
  largest;
- the cores the whole machine kept busy, from /proc/stat (everything: the apps, the broker,
  Redis, the generator and this script; 1.00 is one core), and of those `measuring_cores`,
  what the `millrace ps` and `history` commands this script runs to measure used;
- for each driver, and all together, the cores its process group used (its Python process,
  Spark JVM and Python workers, from /proc/<pid>/stat), their resident memory at the end, and
  the micro-batches its apps' queries started per minute (`millrace history --json`): an app
  in a driver of its own under its name, the apps of a host (as `deploy` runs them) together
  under `host (...)`;
- where the drivers' CPU went, under `threads`: the cores used by each kind of thread (the
  process's command and the thread's name: `java/C2 CompilerThre`, `java/stream executio`,
  `python3/python3`...), the busiest twelve and the others together.

It reads the apps through `millrace ps --json` and `millrace history --json` only, and the
seconds from the demo's start to its first top 3 from what it prints.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from _harness import (
    batches_started,
    cli_json,
    cpu_spent,
    group_cpu_seconds,
    group_rss_mib,
    group_thread_cpu_seconds,
    isolated_workspace,
    machine_cpu_seconds,
    sample_lags,
    write_results,
)

# The demo's runs measured, their flags and environment: each app in a Spark application of
# its own (`--isolated`, the baseline, as before the host), all four in the workspace's host
# (the default), and in the host with Spark's own codegen cache of 100 classes.
WORKLOADS: dict[str, tuple[list[str], dict[str, str]]] = {
    "demo_isolated": (["--isolated"], {}),
    "demo": ([], {}),
    "demo_codegen_cache_100": ([], {"MILLRACE_SPARK_CODEGEN_CACHE": "100"}),
}
DEMO_RATE = 200.0
"""The demo's own rate; a workload run at another is named with its rate (`demo_5000eps`)."""
LAG_EVERY_S = 5.0
THREAD_KINDS = 12
# How the demo shows its first top 3.
FIRST_TOP_K = re.compile(r"^first top-K after (\d+) s$", re.M)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm-up-s", type=float, default=180.0, help="Seconds before measuring.")
    parser.add_argument("--measure-s", type=float, default=120.0, help="Seconds measured.")
    parser.add_argument("--rate", type=float, default=DEMO_RATE, help="Events per second.")
    parser.add_argument(
        "--only",
        choices=sorted(WORKLOADS),
        action="append",
        help="Run only this workload (repeatable); default: all, in this order.",
    )
    arguments = parser.parse_args()
    # The demo is stopped with Ctrl-C's signal. Started in the background by a shell (`cmd &`)
    # this script would ignore SIGINT, and so would the demo it starts, which then ran on past
    # its stop; with a handler of our own, the demo gets the default one.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results: dict[str, object] = {
        "warm_up_s": arguments.warm_up_s,
        "measure_s": arguments.measure_s,
        "rate": arguments.rate,
    }
    first_top_k: dict[str, dict[str, float | None]] = {}
    # A run at another rate is another figure: docs/benchmarks.md shows each.
    rate = "" if arguments.rate == DEMO_RATE else f"_{arguments.rate:g}eps"
    for workload in arguments.only or WORKLOADS:
        flags, environment = WORKLOADS[workload]
        flags = [*flags, "--rate", f"{arguments.rate:g}"]
        tables, first_s = _demo_cost(flags, environment, arguments.warm_up_s, arguments.measure_s)
        results |= {f"{workload}{rate}{suffix}": table for suffix, table in tables.items()}
        first_top_k[f"{workload}{rate}"] = {"first_top_k_s": first_s}
    results[f"first_top_k{rate}"] = first_top_k
    write_results("demo-cost", results)


def _demo_cost(
    flags: list[str], environment: dict[str, str], warm_up_s: float, measure_s: float
) -> tuple[dict[str, dict], float | None]:
    """Run `millrace demo` with `flags` and `environment` in a workspace of its own, and
    measure its drivers.

    Returns its tables by the suffix of their names: the drivers' costs (""), each app's
    processing lag (`_lags`, sampled every `LAG_EVERY_S`), the drivers' CPU by kind of
    thread (`_threads`); and the seconds the demo took to its first top 3 (None if it
    showed none).
    """
    with isolated_workspace() as home:
        log = (home / "demo.log").open("w")
        demo = subprocess.Popen(
            [sys.executable, "-m", "millrace.cli.main", "demo", *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **environment},
        )
        try:
            time.sleep(warm_up_s)
            if demo.poll() is not None:
                printed = (home / "demo.log").read_text()[-2000:]
                raise SystemExit(f"the demo ended early; its last lines:\n{printed}")
            drivers = _drivers(cli_json("ps"))
            batches_before = {name: batches_started(apps) for name, (_, apps) in drivers.items()}
            cpu_before = {name: group_cpu_seconds(pid) for name, (pid, _) in drivers.items()}
            threads_before = {pid: group_thread_cpu_seconds(pid) for pid, _ in drivers.values()}
            busy_before, idle_before = machine_cpu_seconds()
            own_before = _waited_children_cpu_seconds()
            lags = sample_lags(time.monotonic() + measure_s, LAG_EVERY_S)
            busy_after, idle_after = machine_cpu_seconds()
            own_after = _waited_children_cpu_seconds()
            cpu_after = {name: group_cpu_seconds(pid) for name, (pid, _) in drivers.items()}
            threads_after = {pid: group_thread_cpu_seconds(pid) for pid, _ in drivers.values()}
            batches_after = {name: batches_started(apps) for name, (_, apps) in drivers.items()}
            memory = {name: group_rss_mib(pid) for name, (pid, _) in drivers.items()}
        finally:
            # Ctrl-C, as a user stops the demo: it stops the generator and the four apps.
            os.killpg(demo.pid, signal.SIGINT)
            demo.wait(timeout=120)
            log.close()
        first = FIRST_TOP_K.search((home / "demo.log").read_text())
    minutes = measure_s / 60
    sides: dict[str, dict[str, float]] = {
        name: {
            "cores_used": cpu_spent(cpu_before[name], cpu_after[name]) / measure_s,
            "rss_mib": memory[name],
            "batches_per_minute": (batches_after[name] - batches_before[name]) / minutes,
        }
        for name in sorted(drivers)
    }
    sides["all apps"] = {
        figure: sum(app[figure] for app in sides.values())
        for figure in ("cores_used", "rss_mib", "batches_per_minute")
    }
    busy = busy_after - busy_before
    busy_share = busy / (busy + idle_after - idle_before)
    sides["whole machine"] = {"cores_used": busy_share * (os.cpu_count() or 1)}
    # The `millrace ps` and `history` this script ran to measure, which a demo does not.
    sides["whole machine"]["measuring_cores"] = (own_after - own_before) / measure_s
    lag_figures = {
        app: {"median_lag_s": statistics.median(seen), "max_lag_s": max(seen)}
        for app, seen in sorted(lags.items())
    }
    threads: dict[str, float] = {}
    for pid, after in threads_after.items():
        for kind, seconds in after.items():
            used = seconds - threads_before[pid].get(kind, 0.0)
            threads[kind] = threads.get(kind, 0.0) + max(0.0, used) / measure_s
    busiest = sorted(threads, key=threads.__getitem__, reverse=True)
    by_thread = {kind: {"cores_used": threads[kind]} for kind in busiest[:THREAD_KINDS]}
    by_thread["others"] = {"cores_used": sum(threads[kind] for kind in busiest[THREAD_KINDS:])}
    first_s = float(first[1]) if first is not None else None
    return {"": sides, "_lags": lag_figures, "_threads": by_thread}, first_s


def _waited_children_cpu_seconds() -> float:
    """The CPU seconds of this script's children that ended and were waited for.

    The demo itself is waited for only after the measurement, so within it these are the
    commands the script ran to measure.
    """
    times = os.times()
    return times.children_user + times.children_system


def _drivers(apps: list[dict]) -> dict[str, tuple[int, list[str]]]:
    """Each running driver's process group and apps, by the name its figures go under.

    A driver of its own is named by its app, a host by `host` and the apps it runs.
    """
    by_pid: dict[int, list[str]] = {}
    for row in apps:
        if row.get("pid"):
            by_pid.setdefault(row["pid"], []).append(row["app"])
    return {
        names[0] if len(names) == 1 else f"host ({', '.join(sorted(names))})": (pid, names)
        for pid, names in by_pid.items()
    }


if __name__ == "__main__":
    main()
