"""Ad-hoc SQL answered by Spark (`millrace sql --spark`, and queries too big for DuckDB).

For the paper's slice-and-dice use: one Spark SQL query over views of

- each archived stream, as `warehouse__<stream>`: the records as people read them, with
  `value` as text for `get_json_object` and `from_json` (see `warehouse.archive.archive_view`);
- each SQL app result table, as `<app>__<table>`, as the app keeps it now;
- the `views` the caller adds, such as an app's inputs decoded from their archives
  (`millrace.apps.app.App.input_views`, for `millrace sql --app`).

Characters Spark does not allow in a name (such as the `.` of `test.clicks`) become `_`.
Errors name the line and column of the query, as a SQL app's errors do; the rules both
engines share are in `millrace.warehouse.adhoc_query`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from millrace.config.storage import listing
from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from millrace.warehouse.adhoc_query import (
    QueryResult,
    line_and_column,
    query_error,
    require_distinct_columns,
    require_query,
    tables_hint,
)
from millrace.warehouse.archive import archive_view
from millrace.warehouse.delta import spark_read
from millrace.warehouse.layout import archived_streams, view_name
from millrace.warehouse.result_tables import result_tables

_SPARK_POSITION = re.compile(r"\(line (?P<line>\d+), pos (?P<pos>\d+)\)")


@dataclass(frozen=True)
class View:
    """A table that queries can read: what it holds, and how to read it (on first use).

    Example:
        >>> def todays_clicks() -> DataFrame: ...
        >>> View("the clicks of today", todays_clicks).description
        'the clicks of today'
    """

    description: str
    read: Callable[[], DataFrame]


def register_views(
    spark: SparkSession,
    workspace: Workspace,
    views: Mapping[str, View] = MappingProxyType({}),
    *,
    used_by: str | None = None,
) -> dict[str, str]:
    """Register the warehouse's views and `views` (see the module); what each holds, by name.

    With `used_by`, only the views whose names that query text mentions are registered (each
    costs a look at its table), though all are described.
    """
    every: dict[str, View] = {}
    for stream in archived_streams(workspace):
        every[view_name("warehouse", stream)] = View(
            f"archive of stream {stream}",
            functools.partial(archive_view, spark, workspace, stream),
        )
    for app in listing(workspace.tables_dir):
        for table in result_tables(workspace, app.name):
            every[view_name(app.name, table)] = View(
                f"result table {table} of app {app.name}",
                functools.partial(spark_read, spark, workspace.result_table(app.name, table)),
            )
    every |= views
    mentioned = None if used_by is None else used_by.lower()
    for name, view in every.items():
        if mentioned is None or name.lower() in mentioned:
            view.read().createOrReplaceTempView(name)
    return {name: view.description for name, view in every.items()}


def run_query(
    spark: SparkSession,
    workspace: Workspace,
    text: str,
    *,
    views: Mapping[str, View] = MappingProxyType({}),
    limit: int | None = None,
) -> QueryResult:
    """Run one Spark SQL query over the warehouse's views and `views`; at most `limit` rows.

    Only queries run (SELECT, WITH, FROM..., VALUES, TABLE, SHOW, DESCRIBE, EXPLAIN): the
    warehouse is written by archive jobs and apps, never by hand. A query that Spark cannot
    parse or analyse raises `SqlError` starting with `<query>:line:column`.
    """
    require_query(text)
    described = register_views(spark, workspace, views, used_by=text)
    try:
        frame = spark.sql(text)
        require_distinct_columns(text, frame.columns)
        if limit is not None:
            frame = frame.limit(limit + 1)
        rows = [row.asDict(recursive=True) for row in frame.collect()]
    except ParseException as error:
        raise _parse_error(text, error) from None
    except AnalysisException as error:
        raise _analysis_error(text, error, described) from None
    complete = limit is None or len(rows) <= limit
    return QueryResult(frame.columns, rows[:limit], described, "spark", complete)


def _parse_error(text: str, error: ParseException) -> SqlError:
    match = _SPARK_POSITION.search(str(error))
    line, column = (int(match["line"]), int(match["pos"]) + 1) if match else (1, 1)
    return query_error(
        text,
        line,
        column,
        _summary(error),
        hint="fix the SQL at the mark; it is Spark SQL, as in a SQL app's statements",
    )


def _analysis_error(text: str, error: AnalysisException, views: dict[str, str]) -> SqlError:
    summary = _summary(error)
    contexts = error.getQueryContext()
    line, column = 1, 1
    if contexts and contexts[0].startIndex() >= 0:
        line, column = line_and_column(text, contexts[0].startIndex())
    else:
        match = _SPARK_POSITION.search(str(error))
        if match:
            line, column = int(match["line"]), int(match["pos"]) + 1
    if error.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":
        hint = tables_hint(views)
    else:
        hint = "check the names against the tables' columns (DESCRIBE <table> lists them)"
    return query_error(text, line, column, summary, hint=hint)


def _summary(error: Exception) -> str:
    first = str(error).strip().splitlines()[0]
    # Spark's text ends with its SQLSTATE and, for some errors, a position we give ourselves.
    return re.sub(r"\s*SQLSTATE: \w+.*$", "", first).strip()
