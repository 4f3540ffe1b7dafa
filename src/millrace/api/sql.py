"""The ad-hoc query route: `POST /sql`, one Spark SQL query over the warehouse, as JSON.

The query reads the tables `millrace sql` reads (archived streams as `warehouse__<stream>`, SQL
apps' results as `<app>__<table>`; `SHOW TABLES` lists them) and is answered in the service's
process by DuckDB (`millrace.warehouse.local_sql`), never by Spark: a query whose tables are
too big for it is refused (code `sql-size`, 422) with a hint naming `millrace sql --spark`.
It runs with two limits, so that a request cannot hold the service: `sql.time_limit_s`
seconds, after which it is
stopped, and the request's `limit` rows, past which no rows are returned at all. Both are
errors with code `sql-limit` and status 422, a query that is not valid (or not a query: the
warehouse is never written from here) one with code `sql` and status 400. As every route, it
needs the service's token when there is one, and the service has one when it listens beyond
loopback (`millrace.api.app.check_binding`). The dashboard's query page (`/ui/query`) calls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from millrace.api.deps import get_workspace
from millrace.api.errors import ERROR_RESPONSES, ErrorResponse
from millrace.config.workspace import Workspace
from millrace.errors import QueryLimitError
from millrace.warehouse.adhoc_query import Engine
from millrace.warehouse.local_sql import run_local_query

router = APIRouter(
    responses={
        **ERROR_RESPONSES,
        422: {
            "model": ErrorResponse,
            "description": "The answer had more rows than `limit`, or the query ran past the "
            "time limit (`sql.time_limit_s`): code `sql-limit`, and no rows; or its tables hold "
            "more than `sql.local_max_mb`: code `sql-size` (`millrace sql` asks Spark).",
        },
    }
)

DEFAULT_ROWS = 1_000
"""The rows an answer may have when the request does not say."""
MAX_ROWS = 10_000
"""The most rows a request may ask for."""
_MAX_QUERY_CHARS = 100_000

JsonValue = Any  # Any: a JSON value (null, boolean, number, text, list, object)
"""A value of an answer's row, as JSON carries it."""


class SqlRequest(BaseModel):
    """One query and the most rows its answer may have."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "query": "SELECT window_start, SUM(orders) AS orders "
                    "FROM checkout__orders_per_minute GROUP BY window_start "
                    "ORDER BY window_start",
                    "limit": 100,
                }
            ]
        },
    )

    query: str = Field(
        min_length=1,
        max_length=_MAX_QUERY_CHARS,
        description="One query in Spark SQL (SELECT, WITH, VALUES, TABLE, DESCRIBE, SHOW TABLES).",
    )
    limit: int = Field(
        DEFAULT_ROWS,
        ge=1,
        le=MAX_ROWS,
        description="The most rows the answer may have; a longer answer is a 422.",
    )


class SqlAnswer(BaseModel):
    """The answer to a query: its columns, its rows and the engine that gave it.

    Times are ISO-8601 in UTC with `Z`, dates ISO-8601, decimals numbers, lists and maps JSON;
    a number JSON cannot carry (NaN, infinity) is null. `time_column` names the first column
    of times or dates, which the dashboard charts against.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "engine": "duckdb",
                    "columns": ["window_start", "orders"],
                    "rows": [
                        {"window_start": "2026-01-01T12:00:00Z", "orders": 17},
                        {"window_start": "2026-01-01T12:01:00Z", "orders": 21},
                    ],
                    "time_column": "window_start",
                    "complete": True,
                }
            ]
        }
    )

    engine: Engine = Field(description="The engine that answered: DuckDB, in the service.")
    columns: list[str] = Field(description="The answer's columns, in order.")
    rows: list[dict[str, JsonValue]] = Field(description="The rows, each by column name.")
    time_column: str | None = Field(
        description="The first column whose values are times or dates, if any."
    )
    complete: bool = Field(
        description="Always true: an answer over the row limit is refused, never cut."
    )


@router.post("/sql", tags=["warehouse"])
def run_sql(
    request: SqlRequest,
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> SqlAnswer:
    """Run one query over the warehouse's tables, within the time and row limits.

    Example:
        POST /sql {"query": "SELECT topic, COUNT(*) AS n FROM trending_ranker__top_events
        GROUP BY topic", "limit": 100}
    """
    # A plain `def`: FastAPI runs it in a worker thread, so a long query holds no event loop.
    answer = run_local_query(
        workspace,
        request.query,
        limit=request.limit,
        time_limit_s=workspace.settings.sql_time_limit_s,
    )
    if not answer.complete:
        raise QueryLimitError(
            f"the answer has more than {request.limit:,} rows; add a LIMIT or aggregate",
            hint=f'or ask for more rows with "limit" (at most {MAX_ROWS:,})',
        )
    return SqlAnswer(
        engine=answer.engine,
        columns=answer.columns,
        rows=[{column: json_value(value) for column, value in row.items()} for row in answer.rows],
        time_column=time_column(answer.columns, answer.rows),
        complete=True,
    )


def json_value(value: object) -> JsonValue:
    """`value` as JSON carries it: times in UTC with `Z` (without a zone, they are UTC).

    Example:
        >>> json_value({"at": datetime(2026, 1, 1, 12), "amount": Decimal("2.50")})
        {'at': '2026-01-01T12:00:00Z', 'amount': 2.5}
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        utc = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        return utc.isoformat() + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, bytes):
        return value.hex()
    return str(value)  # such as an interval or a UUID: its text


def time_column(columns: Sequence[str], rows: Sequence[Mapping[str, object]]) -> str | None:
    """The first column whose values are all times or dates (nulls aside), if any.

    Example:
        >>> time_column(["topic", "day"], [{"topic": "news", "day": date(2026, 1, 1)}])
        'day'
    """
    for column in columns:
        values = [row.get(column) for row in rows if row.get(column) is not None]
        if values and all(isinstance(value, date) for value in values):
            return column
    return None
