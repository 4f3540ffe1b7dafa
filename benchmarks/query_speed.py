"""How fast `millrace query` answers from a result table of 5,000 rows, next to starting Python.

Run it with `.venv/bin/python benchmarks/query_speed.py [--runs N] [--baseline-src DIR]` after
`make setup`. It uses its own workspace with one result table as a SQL app in mode 'final'
leaves it (one Delta commit per window: 50 windows of 100 categories), and times two queries
as a user runs them, each a new Python process from start to exit: the whole table, and one
category's rows of the 3 latest windows. With `--baseline-src` pointing at another checkout's
`src/`, the same queries through that checkout's CLI are timed too, interleaved, and each
query gets its ratio to them; with neither, the ratio to `python -c pass`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from _harness import isolated_workspace, write_results
from deltalake import write_deltalake

APP, TABLE = "bench_query", "per_minute"
WINDOWS, CATEGORIES = 50, 100
QUERIES: dict[str, list[str]] = {
    "query_all": [f"{APP}.{TABLE}"],
    "query_where_last": [f"{APP}.{TABLE}", "--where", "category=c7", "--last", "3"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="Runs of each query (median taken).")
    parser.add_argument("--baseline-src", type=Path, help="Another checkout's src/ to compare.")
    options = parser.parse_args()
    sides: dict[str, str | None] = {"millrace": None}
    if options.baseline_src:
        sides["baseline"] = str(options.baseline_src.resolve())
    with isolated_workspace() as home:
        _write_table(home / "tables" / APP / TABLE)
        seconds: dict[str, list[float]] = {"python_pass": []}
        for _ in range(options.runs):
            seconds["python_pass"].append(_wall_s(["-c", "pass"], None))
            for name, arguments in QUERIES.items():
                for side, source in sides.items():
                    command = ["-m", "millrace.cli.main", "query", *arguments]
                    seconds.setdefault(f"{name}.{side}", []).append(_wall_s(command, source))
    python_s = statistics.median(seconds["python_pass"])
    results: dict[str, object] = {
        "rows": WINDOWS * CATEGORIES,
        "runs": options.runs,
        "baseline_src": sides.get("baseline"),
        "python_pass_median_s": python_s,
    }
    for name in QUERIES:
        medians = {side: statistics.median(seconds[f"{name}.{side}"]) for side in sides}
        result: dict[str, object] = {
            "wall_s": {side: seconds[f"{name}.{side}"] for side in sides},
            "median_wall_s": medians,
            "ratio_to_python_pass": medians["millrace"] / python_s,
        }
        if "baseline" in medians:
            result["ratio_to_baseline"] = medians["millrace"] / medians["baseline"]
        results[name] = result
    write_results("query-speed", results)


def _write_table(path: Path) -> None:
    """The result table: each window's rows appended in a commit of its own."""
    utc = pa.timestamp("us", tz="UTC")
    for window in range(WINDOWS):
        start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=window)
        rows = {
            "window_start": pa.array([start] * CATEGORIES, type=utc),
            "window_end": pa.array([start + timedelta(minutes=1)] * CATEGORIES, type=utc),
            "category": [f"c{n}" for n in range(CATEGORIES)],
            "n": [window * n for n in range(CATEGORIES)],
            "total_score": [window * n / 3 for n in range(CATEGORIES)],
        }
        write_deltalake(path, pa.table(rows), mode="append")


def _wall_s(arguments: list[str], source: str | None) -> float:
    """Seconds from starting `python ARGUMENTS` to its exit, importing millrace from `source`."""
    environment = dict(os.environ)
    if source is not None:
        environment["PYTHONPATH"] = source
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, *arguments], check=True, stdout=subprocess.DEVNULL, env=environment
    )
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
