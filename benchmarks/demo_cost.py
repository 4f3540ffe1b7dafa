"""What the demo pipeline costs at its default rate: the machine's CPU, each app's, memory, batches.

Run it with `.venv/bin/python benchmarks/demo_cost.py [--warm-up-s W] [--measure-s M]` after
`make setup`, on a machine doing nothing else. It starts a workspace of its own and runs
`millrace demo` in it (four deployed apps, 200 events a second). After W seconds, once the
apps have started and their first windows have closed, it measures for M seconds:

- the cores the whole machine kept busy, from /proc/stat (everything: the apps, the broker,
  Redis, the generator and this script; 1.00 is one core);
- for each app, and all four together, the cores its process group used (its driver, Spark
  JVM and Python workers, from /proc/<pid>/stat), their resident memory at the end, and the
  micro-batches its queries started per minute (`millrace history --json`).

It reads the apps through `millrace ps --json` and `millrace history --json` only, so that the
same command measures any version of millrace.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from _harness import (
    cli_json,
    cpu_spent,
    group_cpu_seconds,
    group_rss_mib,
    isolated_workspace,
    machine_cpu_seconds,
    write_results,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm-up-s", type=float, default=180.0, help="Seconds before measuring.")
    parser.add_argument("--measure-s", type=float, default=120.0, help="Seconds measured.")
    arguments = parser.parse_args()
    with isolated_workspace() as home:
        log = (home / "demo.log").open("w")
        demo = subprocess.Popen(
            [sys.executable, "-m", "millrace.cli.main", "demo"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            time.sleep(arguments.warm_up_s)
            if demo.poll() is not None:
                printed = (home / "demo.log").read_text()[-2000:]
                raise SystemExit(f"the demo ended early; its last lines:\n{printed}")
            groups = {row["app"]: row["pid"] for row in cli_json("ps") if row.get("pid")}
            batches_before = {app: _batches(app) for app in groups}
            cpu_before = {app: group_cpu_seconds(pid) for app, pid in groups.items()}
            busy_before, idle_before = machine_cpu_seconds()
            time.sleep(arguments.measure_s)
            busy_after, idle_after = machine_cpu_seconds()
            cpu_after = {app: group_cpu_seconds(pid) for app, pid in groups.items()}
            batches_after = {app: _batches(app) for app in groups}
            memory = {app: group_rss_mib(pid) for app, pid in groups.items()}
        finally:
            # Ctrl-C, as a user stops the demo: it stops the generator and the four apps.
            os.killpg(demo.pid, signal.SIGINT)
            demo.wait(timeout=120)
            log.close()
    minutes = arguments.measure_s / 60
    sides: dict[str, dict[str, float]] = {
        app: {
            "cores_used": cpu_spent(cpu_before[app], cpu_after[app]) / arguments.measure_s,
            "rss_mib": memory[app],
            "batches_per_minute": (batches_after[app] - batches_before[app]) / minutes,
        }
        for app in sorted(groups)
    }
    sides["all apps"] = {
        figure: sum(app[figure] for app in sides.values())
        for figure in ("cores_used", "rss_mib", "batches_per_minute")
    }
    busy = busy_after - busy_before
    busy_share = busy / (busy + idle_after - idle_before)
    sides["whole machine"] = {"cores_used": busy_share * (os.cpu_count() or 1)}
    write_results(
        "demo-cost",
        {"warm_up_s": arguments.warm_up_s, "measure_s": arguments.measure_s, "demo": sides},
    )


def _batches(app: str) -> int:
    """The micro-batches the queries of `app` have started so far."""
    return len(cli_json("history", app))


if __name__ == "__main__":
    main()
