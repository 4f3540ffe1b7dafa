"""An ad-hoc query over the warehouse, whichever engine answers it: its rules and its answer.

`millrace sql`, `POST /sql` and the dashboard's query page take one query in Spark SQL over
the same tables (archived streams as `warehouse__<stream>`, SQL apps' results as
`<app>__<table>`). Two engines answer it: DuckDB in the asking process for small questions
(`millrace.warehouse.local_sql`), Spark for the rest (`millrace.warehouse.adhoc_sql`). This
module holds what both share, so that they answer and fail alike: only queries run, an error
points at the query's line and column, and the answer names the engine that gave it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from millrace.errors import SqlError
from millrace.warehouse.result_tables import TableRow

Engine = Literal["duckdb", "spark"]
"""The engine that answered a query: DuckDB in this process, or Spark."""

QUERY_NAME = "<query>"
"""How an error names the query's text, in place of a file name."""

_QUERY_START = re.compile(
    r"^\s*(?:\(\s*)*(SELECT|WITH|FROM|VALUES|TABLE|SHOW|DESCRIBE|DESC|EXPLAIN)\b", re.I
)


@dataclass(frozen=True)
class QueryResult:
    """The columns and rows of a query, the tables it could read and the engine that answered.

    `complete` is False when more rows matched than the caller's limit let through.
    """

    columns: list[str]
    rows: list[TableRow]
    views: dict[str, str]
    engine: Engine = "spark"
    complete: bool = True


def require_query(text: str) -> None:
    """Raise `SqlError` unless `text` is a query (SELECT, WITH, ..., SHOW, DESCRIBE, EXPLAIN).

    The warehouse is written by archive jobs and apps, never by an ad-hoc statement.

    Example:
        >>> require_query("DROP TABLE warehouse__clicks")
        Traceback (most recent call last):
        millrace.errors.SqlError: <query>:1:1: millrace sql runs queries only
    """
    if not _QUERY_START.match(re.sub(r"--[^\n]*|/\*.*?\*/", " ", text, flags=re.S)):
        raise SqlError(
            f"{QUERY_NAME}:1:1: millrace sql runs queries only",
            hint="start with SELECT, WITH, FROM, VALUES, TABLE, SHOW, DESCRIBE or EXPLAIN",
        )


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    r"""The line and column, from 1, of character `offset` of `text`.

    Example:
        >>> line_and_column("SELECT 1\nFROM t", 10)
        (2, 2)
    """
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def query_error(text: str, line: int, column: int, summary: str, *, hint: str) -> SqlError:
    r"""A `SqlError` at `line`:`column` of the query `text`, showing that line with a mark.

    Example:
        >>> print(query_error("SELECT\nFROM t", 2, 1, "no columns", hint="name some").message)
        <query>:2:1: no columns
          FROM t
          ^
    """
    lines = text.split("\n")
    shown = lines[line - 1] if 0 < line <= len(lines) else ""
    return SqlError(
        f"{QUERY_NAME}:{line}:{column}: {summary}\n  {shown}\n  {' ' * (column - 1)}^", hint=hint
    )


def require_distinct_columns(text: str, columns: list[str]) -> None:
    """Raise `SqlError` when two of an answer's `columns` share a name.

    A row is a mapping of names to values, so the second would hide the first.

    Example:
        >>> require_distinct_columns("SELECT 1 AS n, 2 AS n", ["n", "n"])
        Traceback (most recent call last):
        millrace.errors.SqlError: <query>:1:1: the answer has two columns named n
          SELECT 1 AS n, 2 AS n
          ^
    """
    repeated = sorted({column for column in columns if columns.count(column) > 1})
    if repeated:
        raise query_error(
            text,
            1,
            1,
            f"the answer has two columns named {', '.join(repeated)}",
            hint="name each column of the SELECT differently, with AS",
        )


def tables_hint(views: dict[str, str]) -> str:
    """The hint of an unknown table: the tables a query can read."""
    return "the tables there are: " + (
        ", ".join(views) or "none yet (archive a stream, or run a SQL app)"
    )
