"""What quiet deployed apps cost in one host, against the same app in a driver of its own.

Run it with `.venv/bin/python benchmarks/host_apps.py [--apps N] [--idle-s S]` after
`make setup`. It starts a broker of its own and a stream of two buckets, and measures two
sides one after the other, with the quiet app of benchmarks/idle_app.py (a 10-second window
count, `LATENESS '5 seconds'`, `IDLE TIMEOUT '2 seconds'`):

- `own_driver` (the baseline): one app deployed as its own Spark application
  (`millrace deploy --isolated`);
- `host`: N such apps deployed into the workspace's one host, as `millrace deploy` runs
  them.

Each side's apps read one record, close its window and go quiet; once every app has written
the window and had time to forget the record's id, the benchmark reads from /proc the CPU
time and resident memory of each side's process groups (a driver's Python process, its Spark
JVM and Python workers; the host's the same), before and after S quiet seconds, and counts
the micro-batches the apps ran meanwhile (`millrace history --json`). It reports the cores
used (1.00 is one core), the resident memory, and the micro-batches per minute, of each side
and of the host per app, and the ratios of the host's per-app figures to the own driver's.

The result goes to benchmarks/results/host-apps-*.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from _harness import (
    batches_started,
    cli,
    cpu_spent,
    group_cpu_seconds,
    group_rss_mib,
    isolated_workspace,
    write_results,
)
from idle_app import SETTLE_S, STREAM, app_sql

WINDOW_WAIT_S = 300.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=20, help="Quiet apps in the host.")
    parser.add_argument("--idle-s", type=float, default=60.0, help="Quiet seconds measured.")
    arguments = parser.parse_args()
    with isolated_workspace(), tempfile.TemporaryDirectory(prefix="millrace-host-") as scratch:
        cli("stream", "create", STREAM, "--buckets", "2")
        own = _quiet_cost(Path(scratch), ["own_0"], arguments.idle_s, hosted=False)
        names = [f"hosted_{number}" for number in range(arguments.apps)]
        host = _quiet_cost(Path(scratch), names, arguments.idle_s, hosted=True)
    per_app = {figure: value / arguments.apps for figure, value in host.items()}
    write_results(
        "host-apps",
        {
            "apps": arguments.apps,
            "idle_s": arguments.idle_s,
            "quiet_apps": {
                "own driver, 1 app": own,
                f"host, {arguments.apps} apps": host,
                "host, per app": per_app,
            },
            "host_per_app_over_own_driver": {
                f"{figure}_ratio": per_app[figure] / own[figure]
                for figure in ("cores_used", "rss_mib")
                if own[figure]
            },
        },
    )


def _quiet_cost(scratch: Path, apps: list[str], idle_s: float, *, hosted: bool) -> dict:
    """Deploy `apps`, let each read one record and go quiet, and measure their processes."""
    from millrace.config.workspace import Workspace
    from millrace.ops import host_inbox, registry

    workspace = Workspace.locate()
    started = time.monotonic()
    for app in apps:
        source = scratch / f"{app}.sql"
        source.write_text(app_sql(app, copies=False))
        cli("deploy", str(source), "--host" if hosted else "--isolated")
    print(f"deployed {len(apps)} apps in {time.monotonic() - started:.0f} s")
    try:
        record = json.dumps({"ts": int(time.time() * 1000), "category": "quiet"})
        cli("publish", STREAM, "-", "--time-field", "ts", stdin=record + "\n")
        _wait_for_windows(workspace, apps)
        time.sleep(SETTLE_S)
        groups = {registry.load(workspace, app).pid for app in apps}
        if None in groups:
            raise SystemExit("an app has no process")
        batches_before = batches_started(apps)
        before = {group: group_cpu_seconds(group) for group in groups}
        time.sleep(idle_s)
        after = {group: group_cpu_seconds(group) for group in groups}
        rss_mib = sum(group_rss_mib(group) for group in groups)
        batches = batches_started(apps) - batches_before
    finally:
        for app in apps:
            cli("stop", app)
        host = host_inbox.running_host(workspace) if hosted else None
        if host is not None:
            os.kill(host.pid, signal.SIGTERM)
    return {
        "cores_used": sum(cpu_spent(before[group], after[group]) for group in groups) / idle_s,
        "rss_mib": rss_mib,
        "batches_per_minute": batches * 60 / idle_s,
    }


def _wait_for_windows(workspace, apps: list[str]) -> None:
    from millrace.warehouse.result_tables import ResultTableNotFoundError, read_result_rows

    deadline = time.monotonic() + WINDOW_WAIT_S
    waiting = set(apps)
    while waiting:
        for app in sorted(waiting):
            try:
                if read_result_rows(workspace, app, "per_category"):
                    waiting.discard(app)
            except ResultTableNotFoundError:
                pass
        if time.monotonic() > deadline:
            raise SystemExit(f"apps {sorted(waiting)} closed no window within {WINDOW_WAIT_S} s")
        time.sleep(1)


if __name__ == "__main__":
    main()
