"""What an app's page shows besides its figures: `GET /apps/{app}/details`.

Its deployment from the registry (state, source, settings, the code's fingerprint), the last
error in its log with the lines around it, its watermark per input with the bucket holding
it back, and its latest batches from the checkpoints' write-ahead logs. An app run in the
foreground (not deployed) has no registry entry and no log: those fields are empty.
"""

from __future__ import annotations

import re
from pathlib import Path as FilePath

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel

from millrace.api.deps import get_monitor, get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.api.monitoring import iso_time
from millrace.config.workspace import Workspace
from millrace.errors import AppNotFoundError
from millrace.monitor.service import Monitor
from millrace.ops import registry
from millrace.ops.checkpoints import history

router = APIRouter(responses=ERROR_RESPONSES)

LOG_TAIL_BYTES = 256_000
"""How much of the end of an app's log is searched for its last error."""
BATCHES_SHOWN = 20
_ERROR_LINE = re.compile(r"error|exception|traceback", re.IGNORECASE)
_BEFORE, _AFTER = 10, 5


class Deployment(BaseModel):
    """A deployed app's registry entry: how it runs and which code."""

    state: str
    kind: str
    source: str
    fingerprint: str
    trigger: str
    settings: dict[str, str]
    pid: int | None
    started_at: str | None
    stopped_at: str | None
    log: str


class LastError(BaseModel):
    """The last line of the app's log that tells of an error, with the lines around it.

    `lines[error_index]` is that line.
    """

    error_index: int
    lines: list[str]


class InputWatermarkModel(BaseModel):
    """One input's watermark: each bucket's newest event time read, the one holding it back."""

    stream: str
    progress: dict[str, str]
    held_back_by: str | None
    future_dated: int


class CheckpointBatch(BaseModel):
    """One batch of one query, from its checkpoint's write-ahead log."""

    query: str
    batch: int
    started: str | None
    committed: str | None
    watermark: str | None


class AppDetails(BaseModel):
    """What the app's page shows besides its figures."""

    name: str
    deployment: Deployment | None
    last_error: LastError | None
    watermarks: list[InputWatermarkModel]
    batches: list[CheckpointBatch]


@router.get("/apps/{app}/details", summary="An app's deployment, last error and latest batches")
def details(
    app: str = Path(description="The app's name."),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> AppDetails:
    """The registry's entry, the log's last error, watermarks per input, latest batches."""
    require_known_app(workspace, monitor, app)
    return app_details(workspace, monitor, app)


def require_known_app(workspace: Workspace, monitor: Monitor, app: str) -> None:
    """Raise `AppNotFoundError` unless `app` is deployed or the monitor knows it."""
    if monitor.status(app) is None and not registry.is_deployed(workspace, app):
        raise AppNotFoundError(
            f"no app {app!r} in the service's workspace",
            hint="GET /apps lists the apps; an app appears once it has run a batch",
        )


def app_details(workspace: Workspace, monitor: Monitor, app: str) -> AppDetails:
    """What `GET /apps/{app}/details` returns for a known app."""
    deployment = None
    last_error = None
    if registry.is_deployed(workspace, app):
        record = registry.load(workspace, app)
        deployment = Deployment(
            state=record.status,
            kind=record.kind,
            source=record.source,
            fingerprint=record.source_hash,
            trigger=record.trigger,
            settings={
                name: str(value)
                for name, value in sorted({**record.options.to_json(), "cwd": record.cwd}.items())
            },
            pid=record.pid,
            started_at=record.started_at,
            stopped_at=record.stopped_at,
            log=record.log,
        )
        last_error = find_last_error(FilePath(record.log))
    status = monitor.status(app)
    watermarks = [
        InputWatermarkModel(
            stream=watermark.stream,
            progress={
                bucket: iso_time(ms) or "" for bucket, ms in sorted(watermark.progress_ms.items())
            },
            held_back_by=watermark.held_back_by,
            future_dated=watermark.future_dated,
        )
        for watermark in (status.watermarks if status is not None else [])
    ]
    batches = sorted(
        history(workspace, app, strict=False),
        key=lambda batch: batch.started_ms or 0,
        reverse=True,
    )[:BATCHES_SHOWN]
    return AppDetails(
        name=app,
        deployment=deployment,
        last_error=last_error,
        watermarks=watermarks,
        batches=[
            CheckpointBatch(
                query=batch.query,
                batch=batch.batch_id,
                started=iso_time(batch.started_ms),
                committed=iso_time(batch.committed_ms),
                watermark=iso_time(batch.watermark_ms),
            )
            for batch in batches
        ],
    )


def find_last_error(log: FilePath) -> LastError | None:
    """The last error in the end of `log` with the lines around it; None without one.

    Only the last `LOG_TAIL_BYTES` are read, so a long log costs no more than a short one.

    Example:
        >>> find_last_error(FilePath("/no/such.log")) is None
        True
    """
    try:
        with log.open("rb") as file:
            start = max(0, file.seek(0, 2) - LOG_TAIL_BYTES)
            file.seek(start)
            lines = file.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if start > 0:
        lines = lines[1:]  # the first line read may start mid-line
    found = next((n for n in range(len(lines) - 1, -1, -1) if _ERROR_LINE.search(lines[n])), None)
    if found is None:
        return None
    first = max(0, found - _BEFORE)
    return LastError(error_index=found - first, lines=lines[first : found + _AFTER + 1])
