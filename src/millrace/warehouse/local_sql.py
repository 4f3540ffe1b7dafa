"""Ad-hoc SQL answered in this process by DuckDB, without Spark (`millrace sql`, `POST /sql`).

A query is Spark SQL, as for `millrace sql --spark` and in SQL apps: sqlglot translates it to
DuckDB's dialect (`get_json_object(value, '$.page')` becomes `value ->> '$.page'`), and
DuckDB runs it over the tables `millrace.warehouse.adhoc_sql` gives Spark, by the same names
and with the same columns. DuckDB reads each Delta table's Parquet files itself, or
delta-rs's Arrow where the table needs delta-rs (see `_register`), and so only the files,
row groups and columns the query needs. Times are DuckDB's `TIMESTAMP`
in UTC, as Spark's are in millrace's sessions (`spark.sql.session.timeZone` is UTC), so that
`date_trunc` and comparisons with literals give Spark's answers.

What does not fit is refused with a message that names `--spark`: Spark SQL that has no
DuckDB translation (a function sqlglot does not know, `from_json` with Spark's schema text,
`EXPLAIN`), and tables whose files together hold more than `sql.local_max_mb`. DuckDB runs
with no access to files or the network besides the tables registered here, its configuration
locked, so that a query reads nothing else and writes nothing; one that runs past its time
limit is interrupted.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from millrace.config.storage import StoragePath, listing
from millrace.config.workspace import Workspace
from millrace.errors import QueryLimitError, QueryTooBigError, SqlError
from millrace.records import ID_HEADER
from millrace.warehouse.adhoc_query import (
    QueryResult,
    line_and_column,
    query_error,
    require_distinct_columns,
    require_query,
    tables_hint,
)
from millrace.warehouse.delta import DeltaSnapshot, open_delta_table
from millrace.warehouse.layout import archived_streams, view_name
from millrace.warehouse.result_tables import TableRow, result_tables
from millrace.warehouse.sql_text import readable, untokenizable

_SPARK_HINT = "millrace sql --spark runs it on Spark, which knows every Spark SQL function"
_FIX_HINT = "fix the SQL at the mark; it is Spark SQL, as in a SQL app's statements"
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
# Type names as sqlglot's `exp.DataType.Type` and DuckDB's information_schema spell them.
_TEXT = {"VARCHAR", "TEXT", "CHAR", "NVARCHAR", "NCHAR"}
_NUMBERS = {
    "TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE", "DECIMAL",
    "UTINYINT", "USMALLINT", "UINT", "UINTEGER", "UBIGINT", "UHUGEINT",
}  # fmt: skip
_SHOW_TABLES = re.compile(r"^\s*SHOW\s+TABLES\s*;?\s*$", re.I)
# Spark functions that sqlglot parses but leaves as they are, which DuckDB would answer
# differently (its own from_json takes a JSON structure, not Spark's schema text).
_NO_TRANSLATION: dict[type, str] = {exp.FromJson: "from_json"}
# The archive as `millrace.warehouse.archive.archive_view` gives it to Spark: text key and
# value (NULL where not UTF-8), the first `id` header as the record's id, headers as a map.
_ARCHIVE_VIEW = """
SELECT
  NULLIF(TRY(decode(list_filter(headers, lambda h: h.key = '{id}')[1].value)), '') AS record_id,
  TRY(decode(key)) AS key,
  TRY(decode(value)) AS value,
  map_from_entries(
    list_transform(headers, lambda h: {{'key': h.key, 'value': TRY(decode(h.value))}})
  ) AS headers,
  "partition" AS bucket,
  "offset",
  CAST("timestamp" AS TIMESTAMP) AS "timestamp",
  event_date
FROM "{source}"
"""


@dataclass(frozen=True)
class _Table:
    description: str
    path: StoragePath
    is_archive: bool


def run_local_query(
    workspace: Workspace,
    text: str,
    *,
    limit: int | None = None,
    time_limit_s: float | None = None,
) -> QueryResult:
    """Run the Spark SQL query `text` with DuckDB over the warehouse; at most `limit` rows.

    Raises `SqlError` for a query that is not one (see `adhoc_query.require_query`), that
    does not parse or bind (at its line and column) or has no DuckDB translation (naming
    `--spark`); `QueryTooBigError` when its tables hold more than `sql.local_max_mb`;
    `QueryLimitError` when it runs longer than `time_limit_s`.

    Example:
        >>> import pyarrow as pa
        >>> from deltalake import write_deltalake
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> table = workspace.result_table("trending_ranker", "top_events")
        >>> write_deltalake(str(table), pa.table({"topic": ["news", "music"], "n": [3, 1]}))
        >>> query = "SELECT SUM(n) AS n FROM trending_ranker__top_events"
        >>> answer = run_local_query(workspace, query)
        >>> answer.rows, answer.engine
        ([{'n': 4}], 'duckdb')
    """
    require_query(text)
    tables = _tables(workspace)
    described = {name: table.description for name, table in tables.items()}
    if _SHOW_TABLES.match(text):
        listed = [{"tableName": name, "description": about} for name, about in described.items()]
        return QueryResult(["tableName", "description"], listed, described, "duckdb")
    tree = _parse(text)
    snapshots = _snapshots(workspace, tables, text)
    connection = duckdb.connect(":memory:")
    timer = threading.Timer(time_limit_s, connection.interrupt) if time_limit_s else None
    try:
        _register(connection, tables, snapshots)
        statement = _duckdb_sql(text, tree, connection)
        if timer is not None:
            timer.start()
        cursor = connection.execute(statement)
        columns = [column[0] for column in cursor.description or []]
        require_distinct_columns(text, columns)
        found: list[tuple[Any, ...]] = (
            cursor.fetchmany(limit + 1) if limit is not None else cursor.fetchall()
        )
    except duckdb.InterruptException:
        raise QueryLimitError(
            f"the query ran longer than its time limit of {time_limit_s:g} s and was stopped",
            hint="filter on event_date or timestamp to read fewer files, or aggregate more",
        ) from None
    except duckdb.Error as error:
        raise _duckdb_error(text, error, described) from None
    finally:
        if timer is not None:
            timer.cancel()
        connection.close()
    rows: list[TableRow] = [
        {name: _plain(value) for name, value in zip(columns, row, strict=True)} for row in found
    ]
    complete = limit is None or len(rows) <= limit
    return QueryResult(columns, rows[:limit], described, "duckdb", complete)


def _tables(workspace: Workspace) -> dict[str, _Table]:
    """The tables a query can read, by name, as `millrace.warehouse.adhoc_sql` names them."""
    tables = {
        view_name("warehouse", stream): _Table(
            f"archive of stream {stream}", workspace.archive(stream), is_archive=True
        )
        for stream in archived_streams(workspace)
    }
    for app in listing(workspace.tables_dir):
        for table in result_tables(workspace, app.name):
            tables[view_name(app.name, table)] = _Table(
                f"result table {table} of app {app.name}",
                workspace.result_table(app.name, table),
                is_archive=False,
            )
    return tables


def _snapshots(
    workspace: Workspace, tables: dict[str, _Table], text: str
) -> dict[str, DeltaSnapshot]:
    """The latest versions of the tables whose names `text` mentions (each costs a log read).

    Raises `QueryTooBigError` when they are too big for this process (see the module).
    """
    snapshots = {}
    for name, table in tables.items():
        if re.search(rf"\b{re.escape(name)}\b", text, re.I):
            snapshot = open_delta_table(table.path)
            if snapshot is not None:
                snapshots[name] = snapshot
    size = sum(snapshot.size_bytes for snapshot in snapshots.values())
    if size > workspace.settings.sql_local_max_mb * 2**20:
        raise QueryTooBigError(
            f"the query reads {size / 2**20:,.0f} MiB of tables, more than "
            f"sql.local_max_mb ({workspace.settings.sql_local_max_mb:,}) lets this process read",
            hint=f"{_SPARK_HINT}, or raise sql.local_max_mb",
        )
    return snapshots


def _parse(text: str) -> exp.Query | exp.Describe:
    """The one query in `text`, parsed as Spark SQL, if DuckDB can run it (see the module)."""
    try:
        statements = [tree for tree in sqlglot.parse(text, read="spark") if tree is not None]
    except sqlglot.errors.ParseError as error:
        raise _parse_error(text, error) from None
    except sqlglot.errors.TokenError:
        offset, summary, hint = untokenizable(text)
        raise query_error(text, *line_and_column(text, offset), summary, hint=hint) from None
    if len(statements) != 1:
        raise query_error(
            text, 1, 1, f"{len(statements)} statements", hint="run one query at a time"
        )
    [tree] = statements
    if not isinstance(tree, exp.Query | exp.Describe):
        raise query_error(
            text,
            1,
            1,
            "the local engine runs SELECT, WITH, VALUES, TABLE, DESCRIBE and SHOW TABLES",
            hint=_SPARK_HINT,
        )
    for node in tree.walk():
        function = node.name if isinstance(node, exp.Anonymous) else _NO_TRANSLATION.get(type(node))
        if function is not None:
            line, column = _position(text, function)
            summary = f"function {function} has no translation for the local engine (DuckDB)"
            raise query_error(text, line, column, summary, hint=_SPARK_HINT)
    return tree


def _duckdb_sql(
    text: str, tree: exp.Query | exp.Describe, connection: duckdb.DuckDBPyConnection
) -> str:
    """`tree` (of the query `text`) in DuckDB's dialect, with the casts Spark makes unasked.

    Spark reads text as a number where a number is wanted (`get_json_object(value, '$.n') > 3`,
    `SUM(get_json_object(...))`, `... / 1000`); DuckDB refuses, or worse, compares as text
    (`'10' > 3` is false there). Text met by arithmetic, by a comparison with a number, or
    summed or averaged is cast to DOUBLE (NULL when it holds no number), and text truncated
    to a time unit (`date_trunc('MINUTE', from_unixtime(...))`) to TIMESTAMP.
    """
    kinds: dict[str, set[str]] = {}
    for name, kind in connection.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
    ).fetchall():
        kinds.setdefault(name.lower(), set()).add(kind)
    annotate_types(tree, dialect="spark")
    wanting = tree.find_all(*_ARITHMETIC, *_COMPARISONS, exp.Sum, exp.Avg, exp.TimestampTrunc)
    # Inner expressions first: a cast wraps a copy of its operand, which must hold their casts.
    for node in reversed(list(wanting)):
        if isinstance(node, exp.TimestampTrunc):
            _cast_text(node.this, kinds, "TIMESTAMP")
        elif isinstance(node, exp.Sum | exp.Avg):
            _cast_text(node.this, kinds, "DOUBLE")
        elif isinstance(node, exp.Binary):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(node, _ARITHMETIC) or _is_kind(other, kinds, _NUMBERS):
                    _cast_text(side, kinds, "DOUBLE")
    try:
        return tree.sql(dialect="duckdb", unsupported_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.UnsupportedError as error:
        summary = f"no translation for the local engine (DuckDB): {error}"
        raise query_error(text, 1, 1, summary, hint=_SPARK_HINT) from None


def _cast_text(node: exp.Expr, kinds: dict[str, set[str]], to: str) -> None:
    if _is_kind(node, kinds, _TEXT):
        node.replace(exp.TryCast(this=node.copy(), to=exp.DataType.build(to)))


def _is_kind(node: exp.Expr, kinds: dict[str, set[str]], wanted: set[str]) -> bool:
    """Whether `node` is of one of the `wanted` types, by sqlglot or by its column's name."""
    if isinstance(node, exp.Column):
        found = kinds.get(node.name.lower(), set())
        return bool(found) and all(kind.split("(")[0] in wanted for kind in found)
    return node.type is not None and node.type.this.name in wanted


def _parse_error(text: str, error: sqlglot.errors.ParseError) -> SqlError:
    first = error.errors[0] if error.errors else {}
    line = int(first.get("line") or 1)
    # sqlglot's column is where the token it stopped at ends.
    column = max(int(first.get("col") or 1) - len(first.get("highlight") or "x") + 1, 1)
    summary = readable(str(first.get("description") or error).split("\n")[0])
    return query_error(text, line, column, summary, hint=_FIX_HINT)


def _register(
    connection: duckdb.DuckDBPyConnection,
    tables: dict[str, _Table],
    snapshots: dict[str, DeltaSnapshot],
) -> None:
    """Make `snapshots` views of `connection`, then lock it away from everything else.

    DuckDB reads a table's Parquet files itself where that gives the table's rows
    (`DeltaSnapshot.parquet_files`): its reader is the faster, and it spares this process
    pyarrow's datasets, whose import (pandas) costs more than most queries. Elsewhere it
    reads delta-rs's Arrow.
    """
    connection.execute("SET TimeZone = 'UTC'")
    folders = []
    for name, snapshot in snapshots.items():
        source = f"_delta_{name}"
        files = snapshot.parquet_files()
        if files:
            hive = "true" if snapshot.partition_columns else "false"
            connection.execute(
                f'CREATE VIEW "{source}" AS SELECT * FROM read_parquet({_sql_list(files)}, '
                f"union_by_name = true, hive_partitioning = {hive})"
            )
            folders.append(f"{snapshot.path}/")
        else:
            connection.register(source, snapshot.arrow_rows())
        if tables[name].is_archive:
            select = _ARCHIVE_VIEW.format(id=ID_HEADER, source=source)
        else:
            select = _result_view(connection, source)
        connection.execute(f'CREATE VIEW "{name}" AS {select}')
    connection.execute(f"SET allowed_directories = {_sql_list(folders)}")
    connection.execute("SET enable_external_access = false")
    connection.execute("SET lock_configuration = true")


def _result_view(connection: duckdb.DuckDBPyConnection, source: str) -> str:
    """A result table's rows, its UTC times as DuckDB's TIMESTAMP (Spark's, in UTC)."""
    times = [
        f'CAST("{column}" AS TIMESTAMP) AS "{column}"'
        for column, kind, *_ in connection.execute(f'DESCRIBE "{source}"').fetchall()
        if kind == "TIMESTAMP WITH TIME ZONE"
    ]
    replace = f" REPLACE ({', '.join(times)})" if times else ""
    return f'SELECT *{replace} FROM "{source}"'


def _sql_list(texts: list[str]) -> str:
    """`texts` as a SQL list of string literals."""
    quoted = (text.replace("'", "''") for text in texts)
    return "[" + ", ".join(f"'{text}'" for text in quoted) + "]"


def _duckdb_error(text: str, error: duckdb.Error, views: dict[str, str]) -> SqlError:
    summary = str(error).strip().split("\n")[0]
    named = re.search(r'with name (\w+)|"([^"]+)"', summary)
    line, column = _position(text, next(filter(None, named.groups()))) if named else (1, 1)
    if isinstance(error, duckdb.CatalogException) and "Table with name" in summary:
        hint = tables_hint(views)
    else:
        hint = (
            "check the names against the tables' columns (DESCRIBE <table> lists them); "
            + _SPARK_HINT
        )
    return query_error(text, line, column, summary, hint=hint)


def _position(text: str, name: str) -> tuple[int, int]:
    """The line and column of the first `name` in `text` as a word; 1:1 when it is not there."""
    found = re.search(rf"(?<![\w.]){re.escape(name)}\b", text, re.I)
    return (1, 1) if found is None else line_and_column(text, found.start())


def _plain(value: object) -> object:
    """A time with a zone (CURRENT_TIMESTAMP) as Spark gives it: UTC, without the zone."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value
