"""Routes for serving tables: `GET /tables/{table}/{key}`, the paper's Laser point lookups.

A table keyed by one column takes the key as it is; a table keyed by several takes one path
segment per key column, in their order (`/tables/visits/2026-01-01/u7`). The row comes from
Redis (`millrace.serving.tables`) as JSON; a table that does not exist, or a key it holds no
row for (never written, or expired), is a 404 with a message.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path

from millrace.api.deps import get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.config.workspace import Workspace
from millrace.errors import RowNotFoundError
from millrace.records import JsonObject
from millrace.serving.tables import describe_table, get_row

router = APIRouter(responses=ERROR_RESPONSES)

TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,199}$"


@router.get("/tables/{table}/{key:path}", tags=["serving"])
def lookup(
    table: str = Path(pattern=TABLE_PATTERN, description="The serving table's name."),
    key: str = Path(description="The key: one path segment per key column, in order."),
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
) -> JsonObject:
    """The row of a serving table with the given key.

    Example:
        GET /tables/classifications/d1
    """
    spec = describe_table(workspace.settings, table)
    parts = key.split("/") if len(spec.keys) > 1 else [key]
    row = get_row(workspace.settings, table, parts if len(parts) > 1 else parts[0])
    if row is None:
        raise RowNotFoundError(
            f"serving table {table!r} holds no row with key {key!r} (never written, or expired)",
            hint=f"`millrace table get {table} KEY` reads the same row from the command line",
        )
    return row
