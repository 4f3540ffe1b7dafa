"""Seconds each slow test file took in the last full run, for `tests/conftest.py` to start the
slowest first: with `make test`'s two workers (pytest-xdist, a file to a worker), a long file
started last would leave the other worker idle for its whole length.

Each run records the seconds of the files it ran in pytest's cache (`tests/conftest.py`), and
a run orders by those when the cache has them, so a checkout that has run the suite follows
its files as they grow or move. A fresh clone (CI) has no cache and orders by
`SECONDS_BY_FILE`: refresh it after a full run with `.venv/bin/python -m tests.durations`,
which prints it from the cache. A file missing from both only starts after those listed;
`tests/test_durations.py` checks that every file named here exists.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CACHE_KEY = "millrace/seconds_by_file"
"""Where the seconds of each file of the last runs are kept in pytest's cache."""
SLOW_S = 5
"""The files that took at least this long are recorded; the others start last anyway."""

SECONDS_BY_FILE = {
    "tests/cli/test_lifecycle.py": 234,
    "tests/apps/test_exactly_once.py": 219,
    "tests/config/test_storage.py": 196,
    "tests/cli/test_apps.py": 152,
    "tests/config/test_storage_hdfs.py": 122,
    "tests/engine/test_low_watermark.py": 115,
    "tests/apps/processors/test_examples.py": 105,
    "tests/bus/test_client_config.py": 98,
    "tests/cli/test_demo.py": 96,
    "tests/sql/test_semantics.py": 95,
    "tests/engine/test_output_watermark.py": 91,
    "tests/apps/processors/test_streaming.py": 89,
    "tests/cli/test_cluster.py": 120,
    "tests/bus/test_broker_cluster.py": 110,
    "tests/cli/test_app_starts.py": 62,
    "tests/apps/sql/test_backpressure.py": 60,
    "tests/apps/processors/test_watermarks.py": 52,
    "tests/cli/test_warehouse.py": 50,
    "tests/cli/test_app_cost.py": 45,
    "tests/api/test_dashboard.py": 42,
    "tests/apps/processors/test_wakeups.py": 42,
    "tests/engine/test_metrics.py": 39,
    "tests/apps/processors/test_failures.py": 36,
    "tests/engine/test_streams.py": 31,
    "tests/apps/test_backfill.py": 30,
    "tests/sql/test_batch.py": 25,
    "tests/serving/test_server.py": 22,
    "tests/sql/test_lookups.py": 20,
    "tests/cli/test_progress_lines.py": 19,
    "tests/api/test_service.py": 18,
    "tests/engine/test_session.py": 16,
    "tests/sql/test_apps.py": 15,
    "tests/sql/test_equality.py": 15,
    "tests/serving/test_tables.py": 14,
    "tests/warehouse/test_archive.py": 14,
    "tests/examples/test_trending.py": 14,
    "tests/cli/test_tables.py": 13,
    "tests/apps/processors/test_batch.py": 13,
    "tests/bus/test_broker.py": 13,
    "tests/cli/test_cli.py": 12,
    "tests/sql/test_lateness.py": 12,
    "tests/engine/test_dead_letter_routing.py": 12,
    "tests/api/test_requests.py": 11,
    "tests/warehouse/test_delta.py": 11,
    "tests/api/test_results.py": 10,
    "tests/bus/test_reader.py": 9,
    "tests/serving/test_processor_tables.py": 9,
    "tests/warehouse/test_docs.py": 9,
    "tests/monitor/test_lag.py": 8,
    "tests/sql/test_docs.py": 7,
    "tests/cli/test_monitor.py": 6,
    "tests/sql/test_windows.py": 6,
    "tests/warehouse/test_sql.py": 6,
    "tests/cli/test_infra.py": 5,
    "tests/bus/test_pipe.py": 5,
}


def main() -> None:
    """Print `SECONDS_BY_FILE` as the last runs recorded it in pytest's cache."""
    cached = Path(".pytest_cache/v") / CACHE_KEY
    if not cached.is_file():
        sys.exit(f"no recorded durations at {cached}: run the suite (`make test`) first")
    seconds = json.loads(cached.read_text())
    print("SECONDS_BY_FILE = {")
    for name, taken in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f'    "{name}": {round(taken)},')
    print("}")


if __name__ == "__main__":
    main()
