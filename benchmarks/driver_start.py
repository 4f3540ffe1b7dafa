"""How long a Spark driver takes to start and do its first work, with and without the
class-data archive that setup builds (src/millrace/engine/class_archive.py).

Run it with `.venv/bin/python benchmarks/driver_start.py [--rounds N]` after `make setup`.
Each round starts a new Python process as `millrace run` does: it builds millrace's
SparkSession, then counts 5,000 rows by key and writes them to a Delta table, its first work.
Rounds alternate between the two sides, so that both see the same machine:

- `archive`: the driver as setup leaves it, mapping the archive;
- `no_archive`: the same driver given only the JDK's own class-data archive (the last
  `-XX:SharedArchiveFile` option wins), as drivers started before the archive existed.

It reports the median seconds from the process's start to its session and to the end of
its first work, the JVM's CPU seconds by then, and the ratios of the two sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import cpu_seconds, write_results

SIDES = ("archive", "no_archive")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="Starts of each side.")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.probe:
        _probe(Path(arguments.probe))
        return
    from millrace.config.jvm import java_executable
    from millrace.config.settings_loader import load_settings
    from millrace.engine.class_archive import driver_options
    from millrace.engine.session import connector_jars

    settings = load_settings(None)
    if not driver_options(settings, connector_jars(settings)):
        sys.exit("no class-data archive for this install: run `make setup` first")
    java_home = Path(os.path.realpath(java_executable())).parents[1]
    jdk_archive = java_home / "lib" / "server" / "classes.jsa"
    figures: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="millrace-bench-") as scratch:
        for number in range(arguments.rounds):
            for side in SIDES:
                options = "" if side == "archive" else f"-XX:SharedArchiveFile={jdk_archive}"
                run = _start(Path(scratch) / f"{side}-{number}", options)
                for name, value in run.items():
                    figures[side].setdefault(name, []).append(value)
    results: dict[str, object] = {"rounds": arguments.rounds}
    for side in SIDES:
        results[side] = {
            **figures[side],
            **{f"median_{name}": statistics.median(v) for name, v in figures[side].items()},
        }
    for name in figures["archive"]:
        archive = statistics.median(figures["archive"][name])
        no_archive = statistics.median(figures["no_archive"][name])
        results[f"{name}_ratio_archive_to_no_archive"] = archive / no_archive
    write_results("driver-start", results)


def _start(folder: Path, java_options: str) -> dict[str, float]:
    """One driver start in a new process: its figures, seconds from the process's start."""
    folder.mkdir(parents=True)
    environment = {
        **os.environ,
        "MILLRACE_HOME": str(folder / "home"),
        "MILLRACE_SPARK_DRIVER_JAVA_OPTIONS": java_options,
    }
    started = time.time()
    ran = subprocess.run(
        [sys.executable, __file__, "--probe", str(folder)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(ran.stdout.splitlines()[-1])
    report["session_s"] = report.pop("session_at") - started
    report["first_work_s"] = report.pop("first_work_at") - started
    return report


def _probe(folder: Path) -> None:
    """The driver's side: start the session, do the first work, report when each was done."""
    from millrace.config.workspace import Workspace, init_workspace
    from millrace.engine import spark_internals
    from millrace.engine.session import spark_session

    workspace = Workspace.locate()
    init_workspace(workspace)
    spark = spark_session(workspace.settings, app_name="millrace-bench-driver-start")
    session_at = time.time()
    rows = spark.range(5000).selectExpr("id % 7 AS key", "id AS value")
    rows.groupBy("key").count().write.format("delta").save(str(folder / "table"))
    first_work_at = time.time()
    jvm_cpu_s = cpu_seconds(spark_internals.driver_pid(spark))
    report = {"session_at": session_at, "first_work_at": first_work_at, "jvm_cpu_s": jvm_cpu_s}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
