"""Serving tables in Redis: the only package that talks to Redis (the paper's Laser).

`serving.tables` reads and writes the tables, `serving.server` runs the local Redis,
`serving.sink` writes a Spark DataFrame into a table from the executors, and `serving.feeds`
fills a table from a stream.
"""

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
