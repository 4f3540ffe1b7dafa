"""Seconds each slow test file took in the last full run, for `tests/conftest.py` to start the
slowest first: with `make test`'s two workers (pytest-xdist, a file to a worker), a long file
started last would leave the other worker idle for its whole length.

From the fresh-clone CI run of b7aa3e4 (`PYTEST_ADDOPTS=--durations=0`, serial), files of 5 s
or more. Refresh it from such a run's output when files grow or move; a file missing here
only starts after those listed.
"""

SECONDS_BY_FILE = {
    "tests/runtime/test_exactly_once.py": 151,
    "tests/cli/test_lifecycle.py": 102,
    "tests/cli/test_apps.py": 97,
    "tests/config/test_storage.py": 96,
    "tests/cli/test_example_lifecycle.py": 86,
    "tests/cli/test_demo.py": 79,
    "tests/bus/test_client_config.py": 76,
    "tests/config/test_storage_hdfs.py": 75,
    "tests/engine/test_low_watermark.py": 66,
    "tests/runtime/test_example_processors.py": 64,
    "tests/engine/test_output_watermark.py": 56,
    "tests/runtime/test_processors.py": 55,
    "tests/cli/test_app_starts.py": 50,
    "tests/sql/test_semantics.py": 46,
    "tests/api/test_dashboard.py": 43,
    "tests/runtime/test_processor_clock.py": 41,
    "tests/runtime/test_processor_watermarks.py": 39,
    "tests/cli/test_warehouse.py": 38,
    "tests/runtime/test_processor_failures.py": 33,
    "tests/engine/test_metrics.py": 32,
    "tests/engine/test_streams.py": 24,
    "tests/sql/test_batch.py": 20,
    "tests/warehouse/test_backfill.py": 19,
    "tests/serving/test_server.py": 18,
    "tests/cli/test_progress_lines.py": 15,
    "tests/cli/test_tables.py": 14,
    "tests/engine/test_session.py": 13,
    "tests/serving/test_tables.py": 12,
    "tests/sql/test_apps.py": 11,
    "tests/engine/test_dead_letter_routing.py": 11,
    "tests/api/test_requests.py": 11,
    "tests/warehouse/test_archive.py": 10,
    "tests/runtime/test_processor_batch.py": 10,
    "tests/examples/test_trending.py": 10,
    "tests/cli/test_cli.py": 10,
    "tests/api/test_results.py": 10,
    "tests/sql/test_lateness.py": 9,
    "tests/bus/test_reader.py": 9,
    "tests/api/test_service.py": 9,
    "tests/warehouse/test_delta.py": 8,
    "tests/sql/test_lookups.py": 8,
    "tests/sql/test_equality.py": 8,
    "tests/bus/test_broker.py": 8,
    "tests/monitor/test_lag.py": 7,
}
