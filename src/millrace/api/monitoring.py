"""Routes for streams, apps and their lag: `/metrics`, `/streams`, `/apps`, `/alerts`."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Path
from fastapi.responses import Response
from pydantic import BaseModel

from millrace.api.deps import get_monitor, get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.bus.streams import (
    appended_since,
    describe_stream,
    list_streams,
    validate_stream_name,
)
from millrace.config.workspace import Workspace
from millrace.errors import AppNotFoundError
from millrace.monitor.prometheus import CONTENT_TYPE
from millrace.monitor.service import Monitor
from millrace.monitor.status import AppStatus

router = APIRouter(responses=ERROR_RESPONSES)

INTERNAL_PREFIX = "_millrace."
STREAM_NAME_PATTERN = r"^(_millrace\.)?[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
"""A stream name: a user stream's, or an internal stream's such as `_millrace.metrics`."""
APPEND_RATE_WINDOW_MS = 60_000
"""A bucket's rate is that of the records appended to it over the last minute."""


class Bucket(BaseModel):
    """One bucket (Kafka partition) of a stream.

    `records_per_second` counts the records appended to it over the last minute.
    """

    bucket: int
    start_offset: int
    end_offset: int
    records: int
    records_per_second: float


class Stream(BaseModel):
    """A stream with its buckets and their offsets."""

    name: str
    records: int
    retention_ms: int
    buckets: list[Bucket]


class InputLagModel(BaseModel):
    """How far behind one input stream an app is."""

    stream: str
    lag_records: int
    lag_seconds: float
    end_offsets: dict[str, int]
    committed_offsets: dict[str, int]


class AppProgress(BaseModel):
    """An app's progress and lag."""

    name: str
    activity: str
    queries: list[str]
    lag_records: int
    lag_seconds: float
    watermark: str | None
    watermark_lag_seconds: float | None
    output_watermark: str | None
    watermark_behind_source_seconds: float | None
    sources: list[str]
    input_rows_per_second: float
    processed_rows_per_second: float
    batches_last_minute: int
    driver_cpu_seconds_last_minute: float | None
    latency_median_seconds: float | None
    latency_p99_seconds: float | None
    last_batch_id: int | None
    last_batch_time: str | None
    state_rows: int
    state_memory_bytes: int
    recent_late_rows: int
    recent_dead_letter_rows: int
    inputs: list[InputLagModel]


class AlertModel(BaseModel):
    """An alert firing now."""

    rule: str
    kind: str
    app: str
    value: float
    threshold: float
    since: str
    message: str


class AlertChange(BaseModel):
    """An alert that fired or resolved, and when."""

    rule: str
    state: str
    kind: str
    app: str
    value: float
    threshold: float
    since: str
    time: str
    message: str


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}}}},
    summary="Lag and progress of every app, in the Prometheus text format",
)
def metrics(monitor: Monitor = Depends(get_monitor)) -> Response:  # noqa: B008
    """Gauges per app and input: lag in records and seconds, watermark lags, rates, batches."""
    return Response(monitor.exposition(), media_type=CONTENT_TYPE)


@router.get("/streams", summary="Every stream with its buckets and offsets")
def streams(workspace: Workspace = Depends(get_workspace)) -> list[Stream]:  # noqa: B008
    """The streams of the bus, sorted by name."""
    return [stream_summary(workspace, name) for name in list_streams(workspace.settings)]


@router.get("/streams/{name}", summary="One stream with its buckets and offsets")
def stream(
    name: str = Path(description="The stream's name.", pattern=STREAM_NAME_PATTERN),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> Stream:
    """One stream; 404 when there is none of that name."""
    validate_stream_name(name.removeprefix(INTERNAL_PREFIX))
    return stream_summary(workspace, name)


@router.get("/apps", summary="Every app with its lag and last batch")
def apps(monitor: Monitor = Depends(get_monitor)) -> list[AppProgress]:  # noqa: B008
    """The apps that have a checkpoint in the workspace or published batches lately."""
    now_ms = int(time.time() * 1000)
    return [_app(status, now_ms) for status in monitor.statuses()]


@router.get("/apps/{app}", summary="One app with its lag and last batch")
def app(
    app: str = Path(description="The app's name."),
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> AppProgress:
    """One app; 404 when the monitor knows none of that name."""
    status = monitor.status(app)
    if status is None:
        raise AppNotFoundError(
            f"no app {app!r} in the service's workspace",
            hint="GET /apps lists the apps; an app appears once it has run a batch",
        )
    return _app(status, int(time.time() * 1000))


@router.get("/alerts", summary="The alerts firing now")
def alerts(monitor: Monitor = Depends(get_monitor)) -> list[AlertModel]:  # noqa: B008
    """Alerts of the rules in millrace.toml that fire now, as of the last evaluation."""
    return [
        AlertModel(
            rule=alert.rule,
            kind=alert.kind,
            app=alert.app,
            value=alert.value,
            threshold=alert.threshold,
            since=iso_time(alert.since_ms) or "",
            message=alert.message,
        )
        for alert in monitor.alerts.firing
    ]


@router.get("/alerts/recent", summary="The latest alerts that fired or resolved")
def recent_alerts(monitor: Monitor = Depends(get_monitor)) -> list[AlertChange]:  # noqa: B008
    """Newest first, the last 100 at most since the service started."""
    return [
        AlertChange(
            rule=alert.rule,
            state=alert.state,
            kind=alert.kind,
            app=alert.app,
            value=alert.value,
            threshold=alert.threshold,
            since=iso_time(alert.since_ms) or "",
            time=iso_time(alert.time_ms) or "",
            message=alert.message,
        )
        for alert in monitor.alerts.recent
    ]


def stream_summary(workspace: Workspace, name: str) -> Stream:
    """Stream `name` as `GET /streams/{name}` gives it; `StreamNotFoundError` if there is none.

    A bucket's rate counts the records that reached it in the last minute, found in the bus's
    time index without reading them (`appended_since`).
    """
    info = describe_stream(workspace.settings, name)
    since_ms = int(time.time() * 1000) - APPEND_RATE_WINDOW_MS
    appended = appended_since(workspace.settings, name, since_ms)
    return Stream(
        name=info.name,
        records=info.record_count,
        retention_ms=info.retention_ms,
        buckets=[
            Bucket(
                bucket=bucket.bucket,
                start_offset=bucket.start_offset,
                end_offset=bucket.end_offset,
                records=bucket.record_count,
                records_per_second=appended[bucket.bucket] / (APPEND_RATE_WINDOW_MS / 1000),
            )
            for bucket in info.buckets
        ],
    )


def _app(status: AppStatus, now_ms: int) -> AppProgress:
    return AppProgress(
        name=status.name,
        activity=status.activity,
        queries=status.queries,
        lag_records=status.lag_records,
        lag_seconds=status.lag_seconds,
        watermark=iso_time(status.watermark_ms),
        watermark_lag_seconds=status.watermark_lag_seconds,
        output_watermark=iso_time(status.output_watermark_ms),
        watermark_behind_source_seconds=status.watermark_behind_source_seconds,
        sources=status.sources,
        input_rows_per_second=status.input_rows_per_second,
        processed_rows_per_second=status.processed_rows_per_second,
        batches_last_minute=status.batches_last_minute,
        driver_cpu_seconds_last_minute=(
            None if status.driver_cpu is None else status.driver_cpu.cpu_s
        ),
        latency_median_seconds=None if status.latency is None else status.latency.median_s,
        latency_p99_seconds=None if status.latency is None else status.latency.p99_s,
        last_batch_id=status.last_batch_id,
        last_batch_time=iso_time(status.last_batch_ms),
        state_rows=status.state_rows,
        state_memory_bytes=status.state_memory_bytes,
        recent_late_rows=status.recent_late_rows,
        recent_dead_letter_rows=status.recent_dead_letter_rows,
        inputs=[
            InputLagModel(
                stream=lag.stream,
                lag_records=lag.lag_records,
                lag_seconds=lag.lag_seconds,
                end_offsets={str(b): o for b, o in lag.end_offsets.items()},
                committed_offsets={str(b): o for b, o in lag.committed_offsets.items()},
            )
            for lag in status.inputs
        ],
    )


def iso_time(time_ms: int | None) -> str | None:
    """`time_ms` (epoch milliseconds) as ISO-8601 UTC to the millisecond; None for None.

    Example:
        >>> iso_time(1767225600000)
        '2026-01-01T00:00:00.000Z'
    """
    if time_ms is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time_ms / 1000)) + (
        f".{time_ms % 1000:03d}Z"
    )
