"""What a deployed SQL app costs while its input is quiet: the CPU its processes keep using.

Run it with `.venv/bin/python benchmarks/idle_app.py [--rounds N] [--idle-s S]` after
`make setup`. It starts a broker of its own and a stream of two buckets. Each round deploys
an app three times, one side after the other, and publishes one record for it to read. The
app counts its input in 10-second windows (`LATENESS '5 seconds'`, `IDLE TIMEOUT '2
seconds'`, mode `final`, exactly-once) into a result table:

- `quiet`: the app as it is: once its window closed and the record's id is forgotten, nothing
  is due, its ticker stops ticking, and Spark asks its sources for new offsets every
  `spark.poll_delay` (1 s by default), then, once Spark reports the query idle (10 s without
  a micro-batch), every `spark.idle_poll_delay` (10 s by default);
- `steady_polling`: the same asking every `spark.poll_delay` however long it has been quiet
  (`spark.idle_poll_delay` at 1 s), as every quiet app did before the idle delay;
- `spark_polling`: the same with both delays at Spark's own default, 10 ms;
- `ticks_on` (the baseline): the same app also copying its input to a stream, which keeps
  its ticker ticking (its readers wait on its watermark markers): a micro-batch about every
  second, as every app with an idle timeout ran before.

Each side's app is deployed with `--isolated`, a Spark application of its own. Once the app
has written the record's window, and the record's id had time to be forgotten, the benchmark
reads the CPU time of the app's process group (the driver's Python process, its
Spark JVM and Python workers) from /proc, before and after S quiet seconds, and counts the
micro-batches the app ran meanwhile (`millrace history --json`). It reports each side's share
of one core and micro-batches per minute.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _harness import cli, cli_json, cpu_spent, group_cpu_seconds, isolated_workspace, write_results

SIDES = ("quiet", "steady_polling", "spark_polling", "ticks_on")
ENVIRONMENTS = {
    "steady_polling": {"MILLRACE_SPARK_IDLE_POLL_DELAY": "1s"},
    "spark_polling": {
        "MILLRACE_SPARK_POLL_DELAY": "10ms",
        "MILLRACE_SPARK_IDLE_POLL_DELAY": "10ms",
    },
}
STREAM = "idle.events"
COPY_STREAM = "idle.copy"
SETTLE_S = 15.0
"""Seconds after the window is written before measuring: the record's id forgotten, and more."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="Deploys of each side.")
    parser.add_argument("--idle-s", type=float, default=60.0, help="Quiet seconds measured.")
    arguments = parser.parse_args()
    shares: dict[str, list[float]] = {side: [] for side in SIDES}
    batches: dict[str, list[float]] = {side: [] for side in SIDES}
    with isolated_workspace(), tempfile.TemporaryDirectory(prefix="millrace-idle-") as scratch:
        cli("stream", "create", STREAM, "--buckets", "2")
        cli("stream", "create", COPY_STREAM, "--buckets", "2")
        for number in range(arguments.rounds):
            for side in SIDES:
                app = f"idle_{side}_{number}"
                source = Path(scratch) / f"{app}.sql"
                source.write_text(app_sql(app, copies=side == "ticks_on"))
                environment = ENVIRONMENTS.get(side, {})
                share, per_minute = _idle_cost(app, source, arguments.idle_s, environment)
                shares[side].append(share)
                batches[side].append(per_minute)
    results: dict[str, object] = {"rounds": arguments.rounds, "idle_s": arguments.idle_s}
    for side in SIDES:
        results[side] = {
            "core_share": shares[side],
            "median_core_share": statistics.median(shares[side]),
            "batches_per_minute": batches[side],
            "median_batches_per_minute": statistics.median(batches[side]),
        }
    write_results("idle-app", results)


def app_sql(app: str, *, copies: bool) -> str:
    """The quiet app's SQL: a 10-second window count of `STREAM`, and with `copies` a copy."""
    copy = f"INSERT INTO STREAM('{COPY_STREAM}') SELECT * FROM events;" if copies else ""
    return f"""
        CREATE APPLICATION {app};
        CREATE INPUT TABLE events (ts TIMESTAMP, category STRING)
          FROM STREAM('{STREAM}') TIME ts LATENESS '5 seconds' IDLE TIMEOUT '2 seconds';
        CREATE TABLE per_category AS
        SELECT category, COUNT(*) AS n FROM events [10 seconds] GROUP BY category;
        {copy}
        """


def _idle_cost(
    app: str, source: Path, idle_s: float, environment: dict[str, str]
) -> tuple[float, float]:
    """Deploy `app`, let it read one record and go quiet: its processes' share of one core
    and the micro-batches it ran a minute, over `idle_s` seconds."""
    from millrace.config.workspace import Workspace
    from millrace.ops import registry
    from millrace.warehouse.result_tables import ResultTableNotFoundError, read_result_rows

    workspace = Workspace.locate()
    # A driver of its own: the app's cost alone, each side with its own settings (a host
    # would serve every side with the settings of the first; benchmarks/host_apps.py
    # measures quiet apps in a host).
    cli("deploy", str(source), "--isolated", environment=environment)
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
                raise SystemExit(f"app {app} closed no window within 180 s")
            time.sleep(1)
        time.sleep(SETTLE_S)
        group = registry.load(workspace, app).pid
        if group is None:
            raise SystemExit(f"app {app} has no process")
        batches_before = len(cli_json("history", app))
        before = group_cpu_seconds(group)
        time.sleep(idle_s)
        after = group_cpu_seconds(group)
        batches_after = len(cli_json("history", app))
    finally:
        cli("stop", app)
    return cpu_spent(before, after) / idle_s, (batches_after - batches_before) * 60 / idle_s


if __name__ == "__main__":
    main()
