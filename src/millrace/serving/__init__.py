"""Serving tables in Redis: the only package that talks to Redis (the paper's Laser)."""

from millrace.serving.tables import (
    TableSpec,
    create_table,
    describe_table,
    drop_table,
    get_row,
    get_rows,
    list_tables,
)

__all__ = [
    "TableSpec",
    "create_table",
    "describe_table",
    "drop_table",
    "get_row",
    "get_rows",
    "list_tables",
]
