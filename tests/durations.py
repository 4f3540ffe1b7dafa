"""Seconds each slow test file took in the last full run, for `tests/conftest.py` to start the
slowest first: with `make test`'s two workers (pytest-xdist, a file to a worker), a long file
started last would leave the other worker idle for its whole length.

From a two-worker run of ff596ee (`make test`'s pytest line with `--durations=0`), files of
5 s or more, with 25 s added to tests/cli/test_lifecycle.py for the checks it took over from
the example lifecycle tests. Refresh it from such a run's output when files grow or move; a
file missing here only starts after those listed.
"""

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
    "tests/cli/test_app_starts.py": 62,
    "tests/apps/processors/test_watermarks.py": 52,
    "tests/cli/test_warehouse.py": 50,
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
