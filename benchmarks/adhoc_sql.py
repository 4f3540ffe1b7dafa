"""How fast `millrace sql` answers a first question from a fresh process, and with `--spark`.

Run it with `.venv/bin/python benchmarks/adhoc_sql.py [--runs N] [--spark-runs N]` after
`make setup`. It uses its own workspace: a stream of 1,000,000 records (JSON events of 20
pages over about 3 hours of event time) archived by `millrace archive --available-now`, and
a result table of 100,000 rows (1,000 windows of 100 categories) as a SQL app in mode 'final'
leaves it. Each query runs as a user runs it, a new `millrace sql --json` process from start
to exit, `--runs` times on DuckDB (the default) and `--spark-runs` times with `--spark`; the
answers of the two engines must be equal. `ratio_to_spark` is DuckDB's median time over
Spark's; `python_pass_median_s` is what starting Python alone takes here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from _harness import cli, isolated_workspace, produce, write_results
from confluent_kafka import Producer
from deltalake import write_deltalake

STREAM, RECORDS, BUCKETS = "bench.events", 1_000_000, 4
APP, TABLE, WINDOWS, CATEGORIES = "bench_results", "per_minute", 1_000, 100
START = datetime(2026, 1, 1, tzinfo=UTC)
ARCHIVE = "warehouse__bench_events"
RESULTS = f"{APP}__{TABLE}"
QUERIES = {
    "result_table_top_10": (
        f"SELECT category, SUM(n) AS n FROM {RESULTS} GROUP BY category ORDER BY n DESC, "
        "category LIMIT 10"
    ),
    "archive_json_group_by": (
        "SELECT get_json_object(value, '$.page') AS page, COUNT(*) AS n,\n"
        f"  SUM(get_json_object(value, '$.ms')) AS total_ms FROM {ARCHIVE}\n"
        "GROUP BY 1 ORDER BY 1"
    ),
    "archive_time_buckets": (
        "SELECT date_trunc('HOUR', from_unixtime(get_json_object(value, '$.time') / 1000))\n"
        f"  AS hour, COUNT(*) AS n FROM {ARCHIVE} GROUP BY 1 ORDER BY 1"
    ),
    "join_result_table_with_archive": (
        "SELECT r.category, COUNT(*) AS events FROM "
        f"(SELECT DISTINCT category FROM {RESULTS} WHERE n > 90000) r\n"
        f"JOIN {ARCHIVE} a ON get_json_object(a.value, '$.category') = r.category\n"
        "GROUP BY r.category ORDER BY r.category"
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="Runs of each query on DuckDB.")
    parser.add_argument("--spark-runs", type=int, default=1, help="Runs of each with --spark.")
    options = parser.parse_args()
    with isolated_workspace() as home:
        loaded_s = _load()
        _write_results_table(home / "tables" / APP / TABLE)
        python_s = statistics.median(_wall_s([sys.executable, "-c", "pass"])[0] for _ in range(3))
        results: dict[str, object] = {
            "records": RECORDS,
            "result_rows": WINDOWS * CATEGORIES,
            "load_and_archive_s": loaded_s,
            "python_pass_median_s": python_s,
        }
        for name, query in QUERIES.items():
            duckdb_runs = [_run_query(query) for _ in range(options.runs)]
            spark_runs = [_run_query(query, "--spark") for _ in range(options.spark_runs)]
            answers = {answer for _, answer in duckdb_runs + spark_runs}
            if len(answers) != 1:
                raise SystemExit(f"{name}: the engines answered differently: {answers}")
            duckdb_s = statistics.median(seconds for seconds, _ in duckdb_runs)
            spark_s = statistics.median(seconds for seconds, _ in spark_runs)
            results[name] = {
                "query": query,
                "rows": len(answers.pop().splitlines()),
                "wall_s": {
                    "duckdb": [s for s, _ in duckdb_runs],
                    "spark": [s for s, _ in spark_runs],
                },
                "median_wall_s": {"duckdb": duckdb_s, "spark": spark_s},
                "ratio_to_spark": duckdb_s / spark_s,
            }
    write_results("adhoc-sql", results)


def _load() -> float:
    """Publish the records and archive them; the seconds both took."""
    from millrace.config.workspace import Workspace

    started = time.perf_counter()
    cli("stream", "create", STREAM, "--buckets", str(BUCKETS), "--archive")
    settings = Workspace.locate().settings
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "linger.ms": 20,
            "compression.type": "lz4",
        }
    )
    for number in range(RECORDS):
        event = {
            "time": int((START + timedelta(milliseconds=11 * number)).timestamp() * 1000),
            "page": f"/page/{number % 20}",
            "category": f"c{number % 100}",
            "ms": number % 977,
        }
        produce(producer, STREAM, json.dumps(event).encode(), f"e{number}")
    producer.flush()
    cli("archive", STREAM, "--available-now")
    return time.perf_counter() - started


def _write_results_table(path: Path) -> None:
    """The result table: windows appended ten to a commit, as a SQL app's micro-batches do."""
    utc = pa.timestamp("us", tz="UTC")
    for first in range(0, WINDOWS, 10):
        starts = [START + timedelta(minutes=window) for window in range(first, first + 10)]
        rows = {
            "window_start": pa.array([s for s in starts for _ in range(CATEGORIES)], type=utc),
            "window_end": pa.array(
                [s + timedelta(minutes=1) for s in starts for _ in range(CATEGORIES)], type=utc
            ),
            "category": [f"c{n}" for _ in starts for n in range(CATEGORIES)],
            "n": [window * n for window in range(first, first + 10) for n in range(CATEGORIES)],
        }
        write_deltalake(path, pa.table(rows), mode="append")


def _run_query(query: str, *options: str) -> tuple[float, str]:
    """Seconds a `millrace sql --json` process took from start to exit, and what it printed."""
    return _wall_s([sys.executable, "-m", "millrace.cli.main", "sql", "--json", *options, query])


def _wall_s(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


if __name__ == "__main__":
    main()
