"""An app's history for charts: its batches over a span from the metrics stream, at most a
given number of points per query and figure, however many batches the span holds."""

from millrace.config.workspace import Workspace
from millrace.monitor.history import SERIES, app_history
from millrace.monitor.metrics_log import Batch, MetricsLog

HOUR_MS = 3_600_000


def test_an_apps_batches_become_points_of_each_figure(
    workspace: Workspace, paused_app: str
) -> None:
    metrics = MetricsLog(workspace.settings, lookback_ms=HOUR_MS)
    metrics.refresh()
    batches = metrics.batches(paused_app)

    history = app_history(workspace.settings, paused_app, span_ms=HOUR_MS, buckets=1000)

    assert history.batches == len(batches)
    query = f"{paused_app}.reader"
    rows_read = [value for _, value in history.series["input_rows_per_second"][query]]
    assert len(rows_read) == len({batch.time_ms // (HOUR_MS // 1000) for batch in batches})
    assert all(history.since_ms <= time_ms <= history.until_ms
               for _, line in history.series["batch_duration_seconds"].items()
               for time_ms, _ in line)  # fmt: skip
    assert set(history.series) <= set(SERIES)
    # Each batch read its stream to the end: no record was left waiting.
    assert {value for _, value in history.series["lag_seconds"][query]} == {0.0}


def test_a_long_span_is_folded_into_the_slices_asked_for(
    workspace: Workspace, paused_app: str
) -> None:
    history = app_history(workspace.settings, paused_app, span_ms=24 * HOUR_MS, buckets=2)

    assert history.batches >= 1
    for figure in history.series.values():
        for points in figure.values():
            assert 1 <= len(points) <= 3


def test_an_app_without_batches_has_empty_series(workspace: Workspace) -> None:
    history = app_history(workspace.settings, "no_such_app", span_ms=HOUR_MS)
    assert (history.batches, history.series) == (0, {})


def test_the_lag_chart_counts_the_records_waiting_in_inputs_not_in_internal_streams() -> None:
    waiting = {
        "sources": [
            {
                "latest_offsets": {"clicks": {"0": 10, "1": 7}},
                "end_offsets": {"clicks": {"0": 4, "1": 7}},
            },
            {
                "latest_offsets": {"_millrace.ticks.counter": {"0": 9}},
                "end_offsets": {"_millrace.ticks.counter": {"0": 2}},
            },
        ]
    }
    _, lag_records = SERIES["lag_records"]

    assert lag_records(Batch("counter", "counter.q", "r", 3, 0, waiting)) == 6.0
