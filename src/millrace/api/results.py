"""Routes for SQL apps' result tables: `GET /apps/{app}/tables` and `/apps/{app}/tables/{table}`.

`?topic=sports&last=3` keeps the rows whose column `topic` is `sports`, from the table's 3
latest windows. Column filters are compared as values (never pasted into a query); a time
column matches every ISO-8601 form of its instant (`2026-01-01T00:00:00Z`, `...+00:00`,
`...T01:00:00+01:00`; UTC without an offset). A column the table does not have is a 400, a
table that does not exist (yet) a 404. The rows are read from the table's Delta files by
`millrace.warehouse.result_tables`, with the filters and `last` applied in the scan, so the
service needs no Spark and reads only the rows it returns.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Request

from millrace.api.app_details import require_known_app
from millrace.api.deps import get_monitor, get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.config.workspace import Workspace
from millrace.monitor.service import Monitor
from millrace.warehouse.result_tables import TableRow, read_result_rows, result_tables

router = APIRouter(responses=ERROR_RESPONSES)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$"
_RESERVED = {"last"}


@router.get("/apps/{app}/tables/{table}", tags=["results"])
def result_rows(
    request: Request,
    app: str = Path(pattern=NAME_PATTERN, description="The SQL app's name."),
    table: str = Path(pattern=NAME_PATTERN, description="The result table's name."),
    last: int | None = Query(
        None, ge=1, le=10_000, description="Keep the rows of the latest N windows."
    ),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> list[TableRow]:
    """Rows of a SQL app's result table; other query parameters filter by column value.

    Example:
        GET /apps/trending_ranker/tables/top_events?topic=sports&last=3
    """
    where = {
        column: value for column, value in request.query_params.items() if column not in _RESERVED
    }
    return read_result_rows(workspace, app, table, where=where, last=last)


@router.get("/apps/{app}/tables", tags=["results"])
def tables(
    app: str = Path(pattern=NAME_PATTERN, description="The app's name."),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> list[str]:
    """The result tables an app has written, sorted (none for a processor); 404 for no app."""
    require_known_app(workspace, monitor, app)
    return result_tables(workspace, app)
