"""An app's figures over time: `GET /apps/{app}/history?span_s=900`, the charts' data.

The series come from `_millrace.metrics` through `millrace.monitor.history.app_history`,
which reads the span in chunks and keeps at most `points` points per query and figure, so
that a day's span costs no more memory than fifteen minutes'.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel

from millrace.api.app_details import require_known_app
from millrace.api.deps import get_monitor, get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.config.workspace import Workspace
from millrace.monitor.history import DEFAULT_BUCKETS, SERIES, app_history
from millrace.monitor.service import Monitor

router = APIRouter(responses=ERROR_RESPONSES)

DEFAULT_SPAN_S = 900
MAX_SPAN_S = 7 * 86_400
"""The metrics stream's retention: there is nothing older to chart."""


class Line(BaseModel):
    """One query's points of a figure: `[time_ms, value]` pairs, oldest first."""

    query: str
    points: list[tuple[int, float]]


class Figure(BaseModel):
    """One chart: a figure of the app's batches, a line per query."""

    name: str
    title: str
    lines: list[Line]


class History(BaseModel):
    """An app's figures over `[since_ms, until_ms]`; `batches` counts its batches there."""

    app: str
    since_ms: int
    until_ms: int
    batches: int
    figures: list[Figure]


@router.get("/apps/{app}/history", summary="An app's figures per batch over a span of time")
def history(
    app: str = Path(description="The app's name."),
    span_s: int = Query(
        DEFAULT_SPAN_S, ge=10, le=MAX_SPAN_S, description="How far back, in seconds."
    ),
    points: int = Query(
        DEFAULT_BUCKETS, ge=2, le=1000, description="At most this many points per line."
    ),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> History:
    """Rates, batch duration, lag, watermark lag, state and dropped rows; 404 for no such app."""
    require_known_app(workspace, monitor, app)
    return app_figures(workspace, app, span_s=span_s, points=points)


def app_figures(workspace: Workspace, app: str, *, span_s: int, points: int) -> History:
    """The figures of `app` over the last `span_s` seconds, as `GET /apps/{app}/history`."""
    found = app_history(workspace.settings, app, span_ms=span_s * 1000, buckets=points)
    return History(
        app=app,
        since_ms=found.since_ms,
        until_ms=found.until_ms,
        batches=found.batches,
        figures=[
            Figure(
                name=name,
                title=title,
                lines=[
                    Line(query=query, points=line)
                    for query, line in sorted(found.series.get(name, {}).items())
                ],
            )
            for name, (title, _) in SERIES.items()
        ],
    )
