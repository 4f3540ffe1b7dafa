"""Reading a SQL app's result tables outside Spark: `millrace query`, HTTP, the demo, the tester.

This is the one reader of result tables (`millrace.apps.sql.result_tables` writes them).

The table is read through `millrace.warehouse.delta`, with the filters and the `last`
windows asked for pushed into the scan, so only the matching rows are read and turned into
Python values. Filter values are compared as values of the column's type, never pasted into
a query; a time column matches every ISO-8601 form of its instant (`2026-01-01T00:00:00Z`,
`...+00:00`, `...T01:00:00+01:00`, `2026-01-01 00:00:00`; UTC without an offset).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from millrace.config.workspace import Workspace
from millrace.errors import ResultTableNotFoundError, SqlError
from millrace.warehouse.delta import DeltaSnapshot, is_delta_table, open_delta_table

TableRow = dict[str, Any]  # Any: each value is of its column's type, which the table decides
"""A row read from a table: its columns' values, by column name."""

_ORDER = ("window_start", "window_end")


def read_result_rows(
    workspace: Workspace,
    app: str,
    table: str,
    *,
    where: dict[str, str] | None = None,
    last: int | None = None,
) -> list[TableRow]:
    """Rows of result table `app.table` whose columns equal `where`, from its `last` windows.

    Rows come ordered by window (start, then end); `last` keeps every matching row of a
    table without windows (no column `window_start`). Times are UTC datetimes. Raises
    `ResultTableNotFoundError` for a table that has no commit yet and `SqlError` for an
    unknown column.

    Example:
        >>> from deltalake import write_deltalake
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> starts = [datetime(2026, 1, 1, 0, minute, tzinfo=UTC) for minute in (0, 0, 10)]
        >>> ends = [datetime(2026, 1, 1, 0, minute + 10, tzinfo=UTC) for minute in (0, 0, 10)]
        >>> rows = pa.table({"window_start": starts, "window_end": ends,
        ...                  "topic": ["sports", "music", "sports"], "n": [3, 4, 5]})
        >>> write_deltalake(str(workspace.result_table("trending_ranker", "top_events")), rows)
        >>> found = read_result_rows(workspace, "trending_ranker", "top_events",
        ...                          where={"topic": "sports"}, last=1)
        >>> [(row["window_start"].minute, row["n"]) for row in found]
        [(10, 5)]
    """
    path = workspace.result_table(app, table)
    snapshot = open_delta_table(path)
    if snapshot is None:
        raise ResultTableNotFoundError(
            f"no result table {app}.{table} (nothing at {path})",
            hint="check the names; the table appears once the app has written its first results",
        )
    schema = snapshot.schema
    matches = _matches(schema, where or {}, f"{app}.{table}")
    if last is not None and last <= 0 and "window_start" in schema.names:
        return []
    if last is not None and "window_start" in schema.names:
        rows = _latest_windows(snapshot, matches, last)
    else:
        rows = snapshot.scan(matches)
    order = [column for column in _ORDER if column in schema.names]
    if order:
        rows = rows.sort_by([(column, "ascending") for column in order])
    return [{column: _plain(value) for column, value in row.items()} for row in rows.to_pylist()]


def result_tables(workspace: Workspace, app: str) -> list[str]:
    """The result tables app `app` has written, sorted (none for an app that has none).

    Example:
        >>> from deltalake import write_deltalake
        >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
        >>> table = workspace.result_table("trending_ranker", "top_events")
        >>> write_deltalake(str(table), pa.table({"n": [1]}))
        >>> result_tables(workspace, "trending_ranker")
        ['top_events']
    """
    folder = workspace.app_tables(app)
    if not folder.is_dir():
        return []
    return sorted(path.name for path in folder.iterdir() if is_delta_table(path))


def _latest_windows(snapshot: DeltaSnapshot, matches: pc.Expression, last: int) -> pa.Table:
    """The rows that `matches` of the `last` (at least 1) latest windows, from few files.

    The `last`-th greatest window start in the log's statistics is a guess of where those
    windows begin: when the matching rows from there on hold `last` windows, no older row can
    be among them, and the files older than the guess are not read. Otherwise every matching
    row is read.
    """
    maxima = sorted(set(snapshot.file_maxima("window_start")), reverse=True)
    if len(maxima) >= last:
        kind = snapshot.schema.field("window_start").type
        guess = pc.field("window_start") >= pa.scalar(maxima[last - 1], type=kind)
        rows, windows = _keep_latest(snapshot.scan(matches & guess), last)
        if windows >= last:
            return rows
    return _keep_latest(snapshot.scan(matches), last)[0]


def _keep_latest(rows: pa.Table, last: int) -> tuple[pa.Table, int]:
    """The rows of the `last` latest windows among `rows`, and how many windows `rows` hold."""
    windows = pc.drop_null(pc.unique(rows.column("window_start"))).sort(order="descending")
    if len(windows) == 0:
        return rows.slice(0, 0), 0
    oldest_kept = windows[min(last, len(windows)) - 1]
    return rows.filter(pc.field("window_start") >= oldest_kept), len(windows)


def _matches(schema: pa.Schema, where: dict[str, str], name: str) -> pc.Expression:
    """The scan filter of column equalities `where`; `SqlError` for a column not in `schema`."""
    condition = pc.scalar(True)
    for column, value in where.items():
        if column not in schema.names:
            raise SqlError(
                f"result table {name} has no column {column!r}",
                hint=f"its columns: {', '.join(schema.names)}",
            )
        condition = condition & _equals(schema.field(column), value)
    return condition


def _equals(field: pa.Field[pa.DataType], value: str) -> pc.Expression:
    """Column `field` equals the text `value` read as a value of the column's type."""
    kind = field.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.field(field.name) == value
    if pa.types.is_timestamp(kind):
        moment = _instant(value)
        if moment is None:
            return pc.scalar(False)
        if kind.tz is None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        return pc.field(field.name) == pa.scalar(moment, type=kind)
    if pa.types.is_nested(kind):
        raise SqlError(
            f"column {field.name!r} holds {kind}, which filters cannot compare",
            hint="filter by a column of plain values (text, numbers, times)",
        )
    try:
        typed = pa.scalar(value).cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pc.scalar(False)  # text that is no value of the column's type matches no row
    return pc.field(field.name) == typed


def _instant(value: str) -> datetime | None:
    """The UTC instant `value` writes in ISO-8601 (UTC without an offset), or None."""
    if not any(separator in value for separator in "T "):
        return None  # a date alone, or a number that fromisoformat reads as one
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _plain(value: object) -> object:
    """`value` as plain Python: times as UTC datetimes (Delta stores UTC instants)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value
