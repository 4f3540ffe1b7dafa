"""What a deployed SQL app costs while its input is quiet: the CPU its processes keep using.

Run it with `.venv/bin/python benchmarks/idle_app.py [--rounds N] [--idle-s S]` after
`make setup`. It starts a broker of its own and a stream of two buckets. Each round deploys
the same app twice, one side after the other, and publishes one record for it to read:

- `ticking`: `IDLE TIMEOUT '2 seconds'`: once the record is read and 2 s old, the idle ticker
  ticks the buckets about once a second, and each tick is a micro-batch;
- `no_ticks`: `IDLE TIMEOUT '1000 days'`: the same app and plan, whose ticker never ticks,
  so that no micro-batch runs while the input is quiet (Spark still asks each source for
  new offsets every `spark.sql.streaming.pollingDelay`, 10 ms).

Once the app has read the record, and the idle timeout has passed, the benchmark reads the CPU
time of the app's process group (the driver's Python process, its Spark JVM and Python
workers) from /proc, before and after S quiet seconds. It reports each side's share of one
core and the ratio of the two.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _harness import cli, cpu_spent, group_cpu_seconds, isolated_workspace, write_results

SIDES = {"ticking": "2 seconds", "no_ticks": "1000 days"}
STREAM = "idle.events"
SETTLE_S = 8.0
"""Seconds after the record is read before measuring: the idle timeout of `ticking`, and more."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="Deploys of each side.")
    parser.add_argument("--idle-s", type=float, default=60.0, help="Quiet seconds measured.")
    arguments = parser.parse_args()
    shares: dict[str, list[float]] = {side: [] for side in SIDES}
    with isolated_workspace(), tempfile.TemporaryDirectory(prefix="millrace-idle-") as scratch:
        cli("stream", "create", STREAM, "--buckets", "2")
        for number in range(arguments.rounds):
            for side, idle_timeout in SIDES.items():
                app = f"idle_{side}_{number}"
                source = Path(scratch) / f"{app}.sql"
                source.write_text(_app_sql(app, idle_timeout))
                shares[side].append(_idle_share(app, source, arguments.idle_s))
    results: dict[str, object] = {"rounds": arguments.rounds, "idle_s": arguments.idle_s}
    for side in SIDES:
        results[side] = {
            "core_share": shares[side],
            "median_core_share": statistics.median(shares[side]),
        }
    ticking = statistics.median(shares["ticking"])
    results["ratio_ticking_to_no_ticks"] = ticking / statistics.median(shares["no_ticks"])
    write_results("idle-app", results)


def _app_sql(app: str, idle_timeout: str) -> str:
    return f"""
        CREATE APPLICATION {app};
        CREATE INPUT TABLE events (ts TIMESTAMP, category STRING)
          FROM STREAM('{STREAM}') TIME ts LATENESS '1 hour' IDLE TIMEOUT '{idle_timeout}';
        CREATE TABLE per_category WITH (mode = 'updates') AS
        SELECT category, COUNT(*) AS n FROM events [1 minute] GROUP BY category;
        """


def _idle_share(app: str, source: Path, idle_s: float) -> float:
    """Deploy `app`, let it read one record and go quiet: its processes' share of one core."""
    from millrace.config.workspace import Workspace
    from millrace.ops import registry
    from millrace.warehouse.result_tables import ResultTableNotFoundError, read_result_rows

    workspace = Workspace.locate()
    cli("deploy", str(source))
    try:
        record = json.dumps({"ts": int(time.time() * 1000), "category": "quiet"})
        cli("publish", STREAM, "-", "--time-field", "ts", stdin=record + "\n")
        deadline = time.monotonic() + 180
        while True:
            try:
                if read_result_rows(workspace, app, "per_category"):
                    break
            except ResultTableNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"app {app} read nothing within 180 s")
            time.sleep(1)
        time.sleep(SETTLE_S)
        group = registry.load(workspace, app).pid
        if group is None:
            raise SystemExit(f"app {app} has no process")
        before = group_cpu_seconds(group)
        time.sleep(idle_s)
        after = group_cpu_seconds(group)
    finally:
        cli("stop", app)
    return cpu_spent(before, after) / idle_s


if __name__ == "__main__":
    main()
