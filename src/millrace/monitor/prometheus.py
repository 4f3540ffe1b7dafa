"""The monitor's figures in the Prometheus text format, for `GET /metrics`.

Every figure is a gauge labelled by app (and stream and bucket where it has them), computed
when scraped from the statuses the monitor gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from millrace.monitor.alerts import Alert
from millrace.monitor.status import AppStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of the exposition."""


def exposition(statuses: list[AppStatus], firing: list[Alert], now_ms: int) -> bytes:
    """The Prometheus text exposition of `statuses` and the `firing` alerts.

    Example:
        >>> from millrace.monitor.status import InputLag
        >>> waiting = [InputLag("clicks", {0: 1300}, {0: 100}, lag_records=1200, lag_seconds=40.0)]
        >>> text = exposition([AppStatus("top_events", [], waiting, "stalled")], [], 0).decode()
        >>> [line for line in text.splitlines() if line.startswith("millrace_app_lag_records")]
        ['millrace_app_lag_records{app="top_events"} 1200.0']
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(statuses, firing, now_ms))
    return generate_latest(registry)


class _Snapshot(Collector):
    def __init__(self, statuses: list[AppStatus], firing: list[Alert], now_ms: int) -> None:
        self.statuses = statuses
        self.firing = firing
        self.now_ms = now_ms

    def collect(self) -> Iterator[GaugeMetricFamily]:
        app = ["app"]
        per_app: dict[str, tuple[str, Callable[[AppStatus], float | None]]] = {
            "lag_records": ("Records waiting in the app's inputs.", lambda s: s.lag_records),
            "lag_seconds": (
                "Seconds behind the newest record, in the input furthest behind.",
                lambda s: s.lag_seconds,
            ),
            "watermark_lag_seconds": (
                "Newest event time read minus the watermark, in seconds.",
                lambda s: s.watermark_lag_seconds,
            ),
            "watermark_age_seconds": (
                "Wall clock minus the watermark, in seconds.",
                lambda s: s.watermark_age_seconds(self.now_ms),
            ),
            "output_watermark_seconds": (
                "Least, over the streams the app writes, of the newest watermark it published "
                "there (epoch seconds).",
                lambda s: None if s.output_watermark_ms is None else s.output_watermark_ms / 1000,
            ),
            "watermark_behind_source_seconds": (
                "Least watermark of the app's sources minus its own, in seconds (0 for a source).",
                lambda s: s.watermark_behind_source_seconds,
            ),
            "input_rows_per_second": (
                "Rows read per second, over the last minute's batches.",
                lambda s: s.input_rows_per_second,
            ),
            "processed_rows_per_second": (
                "Rows processed per second, over the last minute's batches.",
                lambda s: s.processed_rows_per_second,
            ),
            "batches_last_minute": (
                "Micro-batches the app's queries ran in the last minute.",
                lambda s: s.batches_last_minute,
            ),
            "driver_cpu_seconds_last_minute": (
                "CPU seconds (user and system) the app's driver used in the last minute, or "
                "since it started when that is less: its Python process, Spark JVM and Python "
                "workers; absent when no driver records it.",
                lambda s: None if s.driver_cpu is None else s.driver_cpu.cpu_s,
            ),
            "last_batch_id": ("Id of the app's newest batch.", lambda s: s.last_batch_id),
            "last_batch_timestamp_seconds": (
                "When the app's newest batch ran (epoch seconds).",
                lambda s: None if s.last_batch_ms is None else s.last_batch_ms / 1000,
            ),
            "state_rows": ("Rows in the app's state stores.", lambda s: s.state_rows),
            "state_memory_bytes": (
                "Memory of the app's state stores.",
                lambda s: s.state_memory_bytes,
            ),
            "recent_late_rows": (
                "Rows dropped as late in the monitor's lookback.",
                lambda s: s.recent_late_rows,
            ),
            "recent_duplicate_rows": (
                "Copies of records dropped as duplicates in the monitor's lookback.",
                lambda s: s.recent_duplicate_rows,
            ),
            "recent_dead_letter_rows": (
                "Rows dead-lettered in the monitor's lookback.",
                lambda s: s.recent_dead_letter_rows,
            ),
        }
        for name, (doc, value_of) in per_app.items():
            family = GaugeMetricFamily(f"millrace_app_{name}", doc, labels=app)
            for status in self.statuses:
                value = value_of(status)
                if value is not None:
                    family.add_metric([status.name], float(value))
            yield family
        per_input = GaugeMetricFamily(
            "millrace_input_lag_records",
            "Records of one input stream the app has yet to read.",
            labels=["app", "stream"],
        )
        per_input_s = GaugeMetricFamily(
            "millrace_input_lag_seconds",
            "Seconds the app is behind the newest record of one input stream.",
            labels=["app", "stream"],
        )
        ends = GaugeMetricFamily(
            "millrace_input_end_offset",
            "End offset of one bucket of an input stream.",
            labels=["app", "stream", "bucket"],
        )
        committed = GaugeMetricFamily(
            "millrace_input_committed_offset",
            "Offset the app has processed up to in one bucket of an input stream.",
            labels=["app", "stream", "bucket"],
        )
        for status in self.statuses:
            for lag in status.inputs:
                per_input.add_metric([status.name, lag.stream], lag.lag_records)
                per_input_s.add_metric([status.name, lag.stream], lag.lag_seconds)
                for bucket, end in lag.end_offsets.items():
                    ends.add_metric([status.name, lag.stream, str(bucket)], end)
                    committed.add_metric(
                        [status.name, lag.stream, str(bucket)],
                        lag.committed_offsets.get(bucket, 0),
                    )
        yield from (per_input, per_input_s, ends, committed)
        yield self._latency()
        yield from self._watermarks()
        alerts = GaugeMetricFamily(
            "millrace_alert_firing", "1 for each alert firing now.", labels=["rule", "app"]
        )
        for alert in self.firing:
            alerts.add_metric([alert.rule, alert.app], 1.0)
        yield alerts

    def _latency(self) -> GaugeMetricFamily:
        """Each app's latency over the last minute, at the median and the 99th percentile."""
        latency = GaugeMetricFamily(
            "millrace_app_latency_seconds",
            "From a record's arrival on the bus to the end of the micro-batch that read it, "
            "over the records of the last minute's batches, at quantile 0.5 and 0.99.",
            labels=["app", "quantile"],
        )
        for status in self.statuses:
            if status.latency is not None:
                latency.add_metric([status.name, "0.5"], status.latency.median_s)
                latency.add_metric([status.name, "0.99"], status.latency.p99_s)
        return latency

    def _watermarks(self) -> Iterator[GaugeMetricFamily]:
        """Each input bucket's progress, the bucket holding it back, and future-dated rows."""
        progress = GaugeMetricFamily(
            "millrace_input_bucket_event_time_seconds",
            "Largest event time read from one bucket of an input stream (epoch seconds); "
            "the input's low watermark is the least over its buckets, minus the lateness.",
            labels=["app", "stream", "bucket"],
        )
        holding = GaugeMetricFamily(
            "millrace_input_watermark_held_back",
            "1 for the bucket of an input stream that holds the input's watermark back.",
            labels=["app", "stream", "bucket"],
        )
        future = GaugeMetricFamily(
            "millrace_input_recent_future_dated_rows",
            "Rows of an input dated too far ahead of their arrival, dead-lettered in the "
            "monitor's lookback.",
            labels=["app", "stream"],
        )
        for status in self.statuses:
            for watermark in status.watermarks:
                for bucket, time_ms in watermark.progress_ms.items():
                    progress.add_metric([status.name, watermark.stream, bucket], time_ms / 1000)
                if watermark.held_back_by is not None:
                    holding.add_metric([status.name, watermark.stream, watermark.held_back_by], 1)
                future.add_metric([status.name, watermark.stream], watermark.future_dated)
        yield from (progress, holding, future)
