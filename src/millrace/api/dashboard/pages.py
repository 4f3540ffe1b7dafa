"""The dashboard's pages under `/ui/`: the pipeline, an app, a stream, results, alerts, query.

Each page is HTML rendered here from the same functions as the JSON routes
(`build_pipeline`, `app_figures`, `app_details`, `stream_summary`, `newest_records`,
`read_result_rows`), with its charts as SVG, and fetches itself again every few seconds
(`assets/dashboard.js`). The query page is the exception: it stays as it is, and its script
(`assets/query.js`) sends the SQL box's query to `POST /sql` and draws the answer.
A name that does not exist gets a page saying so (404), a failure the service knows (the bus
down) a page with the error's message and hint; neither is a 500.

Access is the API's: when the service has a token, a page without it gets the login page
(401), whose script sends the token in the Authorization header.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from millrace.api.app_details import AppDetails, app_details
from millrace.api.dashboard.charts import line_chart
from millrace.api.dashboard.graph import pipeline_svg
from millrace.api.dashboard.html import (
    error_page,
    escape,
    login_page,
    not_found_page,
    number,
    page,
    state_badge,
    table,
    value_text,
)
from millrace.api.deps import UnauthorizedError, get_monitor, get_workspace
from millrace.api.errors import error_response, status_of, workspace_paths
from millrace.api.history import app_figures
from millrace.api.monitoring import iso_time, stream_summary
from millrace.api.pipeline import build_pipeline
from millrace.api.records import newest_records
from millrace.api.sql import DEFAULT_ROWS, MAX_ROWS
from millrace.bus.streams import dead_letter_stream
from millrace.config.workspace import Workspace
from millrace.errors import MillraceError, StreamNotFoundError
from millrace.monitor.service import Monitor
from millrace.monitor.status import AppStatus
from millrace.ops import registry
from millrace.warehouse.local_sql import run_local_query
from millrace.warehouse.result_tables import read_result_rows, result_tables

router = APIRouter(prefix="/ui", include_in_schema=False)

SPANS = {"5m": 300, "15m": 900, "1h": 3_600, "6h": 21_600, "24h": 86_400}
"""The spans an app's charts offer; 15 minutes by default."""
DEFAULT_SPAN = "15m"
RECORDS_SHOWN = 20
WINDOWS_SHOWN = 5


def install_dashboard(app: FastAPI) -> None:
    """Add the pages to `app`, and the login page for a page requested without the token.

    Example:
        >>> service = FastAPI()
        >>> install_dashboard(service)
        >>> service.url_path_for("app_page", app="top_events")
        '/ui/apps/top_events'
    """
    app.include_router(router)

    async def unauthorized(request: Request, error: Exception) -> HTMLResponse | JSONResponse:
        if request.url.path.startswith("/ui") or not isinstance(error, MillraceError):
            return login_page()
        return error_response(401, error.code, error.message, error.hint)

    app.add_exception_handler(UnauthorizedError, unauthorized)


@router.get("", response_class=RedirectResponse)
def root() -> RedirectResponse:
    """`/ui` is `/ui/`."""
    return RedirectResponse("/ui/")


@router.get("/", response_class=HTMLResponse)
def pipeline_page(
    request: Request,
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> HTMLResponse:
    """The graph of apps, streams and tables, and a table of the apps."""

    def render() -> HTMLResponse:
        graph = build_pipeline(workspace, monitor)
        states = {node.name: node.state for node in graph.nodes if node.kind == "app"}
        rows = [_app_row(status, states.get(status.name)) for status in monitor.statuses()]
        firing = len(monitor.alerts.firing)
        body = (
            "<h1>Pipeline</h1>"
            f'<div class="panel">{pipeline_svg(graph)}</div>'
            f'<h2>Apps</h2><div class="panel">{table(_APP_HEADERS, rows, empty="no apps yet")}'
            f'</div><p><a href="/ui/alerts">{firing} alerts firing</a></p>'
        )
        return page("pipeline", body)

    return _shown(request, render)


@router.get("/apps/{app}", response_class=HTMLResponse)
def app_page(
    request: Request,
    app: str,
    span: str = DEFAULT_SPAN,
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> HTMLResponse:
    """An app's figures now, its charts over `span`, watermarks, last error, batches, settings."""

    def render() -> HTMLResponse:
        status = monitor.status(app)
        deployed = registry.is_deployed(workspace, app)
        if status is None and not deployed:
            return not_found_page(
                f"no app {app!r} in this workspace",
                "an app appears once it has run a batch; the pipeline page lists them",
            )
        if span not in SPANS:
            return error_page(400, f"no span {span!r}", f"choose one of {', '.join(SPANS)}")
        details = app_details(workspace, monitor, app)
        figures = app_figures(workspace, app, span_s=SPANS[span], points=120)
        charts = "".join(
            line_chart(
                figure.title,
                [(_short(line.query, app), line.points) for line in figure.lines],
                figures.since_ms,
                figures.until_ms,
            )
            for figure in figures.figures
        )
        spans = "".join(
            f'<a href="?span={name}"{" class=chosen" if name == span else ""}>{name}</a>'
            for name in SPANS
        )
        tables = result_tables(workspace, app)
        results = (
            f'<p><a href="/ui/apps/{quote(app, safe="")}/results">result tables: '
            f"{escape(', '.join(tables))}</a></p>"
            if tables
            else ""
        )
        state = details.deployment.state if details.deployment else "not deployed"
        body = (
            f"<h1>{escape(app)} {state_badge(state)} "
            f"{state_badge(status.activity if status else None)}</h1>{results}"
            f'<div class="panel">{_summary(status)}</div>'
            f'<h2>Charts over the last <span class="spans">{spans}</span> '
            f'<span class="muted">({figures.batches} batches)</span></h2>'
            f'<div class="charts">{charts}</div>'
            f"<h2>Watermark per input</h2>{_watermarks(details)}"
            f"<h2>Last error</h2>{_last_error(details)}"
            f"<h2>Batches</h2>{_batches(details)}"
            f"<h2>Settings</h2>{_settings(details)}"
        )
        return page(app, body)

    return _shown(request, render)


@router.get("/apps/{app}/results", response_class=HTMLResponse)
def results_page(
    request: Request,
    app: str,
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> HTMLResponse:
    """A SQL app's result tables, newest window first."""

    def render() -> HTMLResponse:
        tables = result_tables(workspace, app)
        known = monitor.status(app) is not None
        if not tables:
            what = (
                f"app {app!r} has no result table yet"
                if known
                else f"no app {app!r} with result tables in this workspace"
            )
            return not_found_page(what, "a SQL app's table appears once its first window closes")
        sections = [
            f'<h2 id="{escape(name)}">{escape(name)}</h2>'
            f'<div class="panel">{_result_rows(workspace, app, name)}</div>'
            for name in tables
        ]
        link = f'<a href="/ui/apps/{quote(app, safe="")}">{escape(app)}</a>'
        return page(f"{app} results", f"<h1>Results of {link}</h1>" + "".join(sections))

    return _shown(request, render)


@router.get("/streams/{name}", response_class=HTMLResponse)
def stream_page(
    request: Request,
    name: str,
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> HTMLResponse:
    """A stream's buckets and their rates, newest records, and dead letters with their reasons."""

    def render() -> HTMLResponse:
        try:
            info = stream_summary(workspace, name)
        except StreamNotFoundError:
            return not_found_page(
                f"no stream {name!r}", "the pipeline page links to the streams the apps use"
            )
        buckets = [
            [
                str(bucket.bucket),
                _num(bucket.start_offset),
                _num(bucket.end_offset),
                _num(bucket.records),
                _num(bucket.records_per_second),
            ]
            for bucket in info.buckets
        ]
        records = [
            [
                str(found.record.bucket),
                _num(found.record.offset),
                escape(found.record.key),
                escape(iso_time(found.record.time_ms)),
                f'<td class="value">{escape(value_text(found.record.value))}</td>',
            ]
            for found in newest_records(workspace, name, RECORDS_SHOWN)
        ]
        retention = (
            "forever" if info.retention_ms < 0 else f"{number(info.retention_ms / 3_600_000)} h"
        )
        buckets_table = table(
            ["bucket", "first offset", "end offset", "records", "records/s, last minute"], buckets
        )
        records_table = table(
            ["bucket", "offset", "key", "event time", "value"], records, empty="no records"
        )
        body = (
            f"<h1>Stream {escape(name)}</h1>"
            f'<div class="panel figures"><div>records kept<b>{number(info.records)}</b>'
            f"</div><div>buckets<b>{len(info.buckets)}</b></div>"
            f"<div>retention<b>{retention}</b></div></div>"
            "<h2>Buckets</h2>"
            f'<div class="panel">{buckets_table}</div><h2>Newest records</h2>'
            f'<div class="panel">{records_table}</div>'
            f"<h2>Dead letters ({escape(dead_letter_stream(name))})</h2>"
            f'<div class="panel">{_dead_letters(workspace, name)}</div>'
        )
        return page(name, body)

    return _shown(request, render)


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(
    request: Request,
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> HTMLResponse:
    """The alerts firing now and the latest that fired or resolved."""

    def render() -> HTMLResponse:
        firing = [
            [
                escape(alert.rule),
                _app_link(alert.app),
                escape(alert.message),
                escape(iso_time(alert.since_ms)),
            ]
            for alert in monitor.alerts.firing
        ]
        recent = [
            [
                escape(iso_time(alert.time_ms)),
                state_badge(alert.state),
                escape(alert.rule),
                _app_link(alert.app),
                escape(alert.message),
            ]
            for alert in monitor.alerts.recent
        ]
        rules = len(monitor.alerts.rules)
        firing_table = table(["rule", "app", "message", "since"], firing, empty="none firing")
        recent_table = table(
            ["time", "state", "rule", "app", "message"],
            recent,
            empty="none since the service started",
        )
        body = (
            "<h1>Alerts</h1>"
            f'<p class="muted">{rules} rules in millrace.toml, checked every '
            f"{monitor.workspace.settings.monitor_interval_s:g} s</p>"
            "<h2>Firing</h2>"
            f'<div class="panel">{firing_table}</div><h2>Recent</h2>'
            f'<div class="panel">{recent_table}</div>'
        )
        return page("alerts", body)

    return _shown(request, render)


@router.get("/query", response_class=HTMLResponse)
def query_page(
    request: Request,
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> HTMLResponse:
    """A SQL box over the warehouse's tables; the answer as a table, and a chart over time."""

    def render() -> HTMLResponse:
        # SHOW TABLES lists the tables as the engine names them, without reading one.
        tables = run_local_query(workspace, "SHOW TABLES").views
        rows = [
            [
                f'<button type="button" class="link" data-table="{escape(name)}">'
                f"{escape(name)}</button>",
                escape(description),
            ]
            for name, description in tables.items()
        ]
        time_limit_s = workspace.settings.sql_time_limit_s
        empty = "none yet: archive a stream, or run a SQL app"
        body = (
            "<h1>Query</h1>"
            '<p class="muted">One query in Spark SQL over the tables below, answered by DuckDB '
            f"in the service: it stops after {time_limit_s:g} s (sql.time_limit_s) and returns "
            f"at most the rows asked for (up to {MAX_ROWS:,}). Queries only: nothing is "
            "written.</p>"
            '<form id="query"><textarea name="query" rows="7" spellcheck="false" '
            'aria-label="SQL query" placeholder="SELECT ... FROM a table below '
            '(Ctrl+Enter runs it)"></textarea>'
            '<div class="controls"><button type="submit">Run</button>'
            f'<label>at most <input name="limit" type="number" min="1" max="{MAX_ROWS}" '
            f'value="{DEFAULT_ROWS}"> rows</label>'
            '<span id="query-status" class="muted" role="status"></span></div></form>'
            '<div id="query-error" class="panel query-error" role="alert" hidden>'
            '<pre class="message"></pre><p class="hint"></p></div>'
            '<section id="query-answer" hidden>'
            '<h2>Answer <span id="query-summary" class="muted"></span></h2>'
            '<div id="query-chart"></div><div class="panel"><table id="query-table">'
            "<thead></thead><tbody></tbody></table></div></section>"
            '<h2>Tables</h2><div class="panel">'
            f"{table(['table', 'holds'], rows, empty=empty)}</div>"
        )
        return page("query", body, refresh_s=0)

    return _shown(request, render)


_APP_HEADERS = [
    "app",
    "state",
    "activity",
    "in rows/s",
    "batches/min",
    "driver cpu/min",
    "lag records",
    "lag s",
    "latency p50/p99 s",
    "watermark lag s",
    "last batch",
]


def _shown(request: Request, render: Callable[[], HTMLResponse]) -> HTMLResponse:
    """The page `render` makes, or the page of the failure it raised."""
    try:
        return render()
    except MillraceError as error:
        hide = workspace_paths(request)
        return error_page(status_of(error), hide(error.message), hide(error.hint) or None)


def _app_row(status: AppStatus, state: str | None) -> list[str]:
    return [
        _app_link(status.name),
        state_badge(state),
        state_badge(status.activity),
        _num(status.input_rows_per_second),
        _num(status.batches_last_minute),
        _driver_cpu(status),
        _num(status.lag_records),
        _num(status.lag_seconds),
        f'<td class="number">{escape(_latency(status))}</td>',
        _num(status.watermark_lag_seconds),
        escape(f"#{status.last_batch_id}" if status.last_batch_id is not None else "-"),
    ]


def _app_link(app: str) -> str:
    return f'<a href="/ui/apps/{quote(app, safe="")}">{escape(app)}</a>'


def _driver_cpu(status: AppStatus) -> str:
    """The CPU the app's driver used in the last minute, and the share of a core, or `-`."""
    shown = status.driver_cpu.described if status.driver_cpu is not None else "-"
    return f'<td class="number">{escape(shown)}</td>'


def _latency(status: AppStatus) -> str:
    """The app's latency over the last minute, `median/p99` in seconds, or `-`."""
    return "-" if status.latency is None else status.latency.pair


def _num(value: float | int | None) -> str:
    return f'<td class="number">{number(value)}</td>'


def _short(query: str, app: str) -> str:
    return query.removeprefix(app + ".") or query


def _summary(status: AppStatus | None) -> str:
    if status is None:
        return '<p class="muted">no batch in the monitor\'s lookback</p>'
    figures = [
        ("input rows/s", number(status.input_rows_per_second)),
        ("processed rows/s", number(status.processed_rows_per_second)),
        ("batches/min", number(status.batches_last_minute)),
        ("driver cpu/min", status.driver_cpu.described if status.driver_cpu else "-"),
        ("lag, records", number(status.lag_records)),
        ("lag, seconds", number(status.lag_seconds)),
        ("latency p50/p99 s", _latency(status)),
        ("watermark", iso_time(status.watermark_ms) or "-"),
        ("watermark lag s", number(status.watermark_lag_seconds)),
        ("output watermark", iso_time(status.output_watermark_ms) or "-"),
        ("behind source s", number(status.watermark_behind_source_seconds)),
        ("state rows", number(status.state_rows)),
        ("last batch", f"#{status.last_batch_id}" if status.last_batch_id is not None else "-"),
    ]
    cells = "".join(f"<div>{escape(name)}<b>{escape(value)}</b></div>" for name, value in figures)
    return f'<div class="figures">{cells}</div>'


def _watermarks(details: AppDetails) -> str:
    rows = [
        [
            _stream_link(watermark.stream),
            escape(
                ", ".join(f"{bucket}: {at}" for bucket, at in sorted(watermark.progress.items()))
            ),
            escape(watermark.held_back_by if watermark.held_back_by is not None else "-"),
            _num(watermark.future_dated),
        ]
        for watermark in details.watermarks
    ]
    headers = ["input", "newest event time read per bucket", "held back by bucket", "future-dated"]
    return f'<div class="panel">{table(headers, rows, empty="no watermark yet")}</div>'


def _last_error(details: AppDetails) -> str:
    if details.deployment is None:
        return '<p class="muted">not deployed: an app run in the foreground prints its errors</p>'
    if details.last_error is None:
        return '<p class="muted">no error in the end of its log</p>'
    lines = "".join(
        f'<span class="error-line">{escape(line)}</span>'
        if n == details.last_error.error_index
        else escape(line) + "\n"
        for n, line in enumerate(details.last_error.lines)
    )
    return (
        f'<div class="panel"><p class="muted">{escape(details.deployment.log)}</p>'
        f"<pre>{lines}</pre></div>"
    )


def _batches(details: AppDetails) -> str:
    rows = [
        [
            escape(batch.query),
            _num(batch.batch),
            escape(batch.started or "-"),
            escape(batch.committed or "running or failed"),
            escape(batch.watermark or "-"),
        ]
        for batch in details.batches
    ]
    headers = ["query", "batch", "planned", "committed", "watermark"]
    return f'<div class="panel">{table(headers, rows, empty="no batch in its checkpoints")}</div>'


def _settings(details: AppDetails) -> str:
    deployment = details.deployment
    if deployment is None:
        return '<p class="muted">not deployed (`millrace deploy` records its settings)</p>'
    rows = [
        ["kind", escape(deployment.kind)],
        ["source", f"<code>{escape(deployment.source)}</code>"],
        ["code fingerprint (SHA-256)", f"<code>{escape(deployment.fingerprint)}</code>"],
        ["trigger", escape(deployment.trigger)],
        *[[escape(name), escape(value)] for name, value in deployment.settings.items()],
        ["process", escape(deployment.pid)],
        ["started", escape(deployment.started_at or "-")],
        ["stopped", escape(deployment.stopped_at or "-")],
    ]
    return f'<div class="panel">{table(["setting", "value"], rows)}</div>'


def _stream_link(stream: str) -> str:
    return f'<a href="/ui/streams/{quote(stream, safe="")}">{escape(stream)}</a>'


def _result_rows(workspace: Workspace, app: str, name: str) -> str:
    rows = read_result_rows(workspace, app, name, last=WINDOWS_SHOWN)
    if "window_start" in (rows[0] if rows else {}):
        rows.sort(key=lambda row: (row["window_start"], row.get("window_end")), reverse=True)
    columns = list(rows[0]) if rows else []
    cells = [[escape(value_text(row[column])) for column in columns] for row in rows]
    return table(columns, cells, empty="no rows yet")


def _dead_letters(workspace: Workspace, stream: str) -> str:
    try:
        letters = newest_records(workspace, dead_letter_stream(stream), RECORDS_SHOWN)
    except StreamNotFoundError:
        return '<p class="muted">none: no record of this stream was set aside</p>'
    rows = [
        [
            escape(iso_time(letter.append_ms)),
            escape(letter.record.value.get("error")),
            escape(letter.record.value.get("stream")),
            _num(letter.record.value.get("bucket")),
            _num(letter.record.value.get("offset")),
            f'<td class="value">{escape(letter.record.value.get("original"))}</td>',
        ]
        for letter in letters
    ]
    headers = ["arrived", "reason", "source stream", "source bucket", "source offset", "record"]
    return table(headers, rows, empty="none")
