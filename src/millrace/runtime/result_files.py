"""Reading a SQL app's result table from its Delta files, without Spark.

`millrace query` reads result tables with Spark; a process that must stay light (the HTTP
service, the demo's live view) reads the same Delta table here: the commits of its
`_delta_log` give the live data files (added and not removed since), which pyarrow reads.
Tables whose rows were deleted through deletion vectors are refused (the tables millrace
writes do not use them).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from millrace.config.workspace import Workspace
from millrace.errors import ResultTableNotFoundError, SqlError

_COMMIT = re.compile(r"^(\d{20})\.json$")


def read_result_rows(
    workspace: Workspace,
    app: str,
    table: str,
    *,
    where: dict[str, str] | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of result table `app.table`, filtered by column equality, from its `last` windows.

    Filter values are compared with each row's value as text (`str`, or ISO-8601 for times),
    never pasted into a query. Rows come ordered by window, then by the other columns as
    stored. Raises `ResultTableNotFoundError` for a table that has no files yet and
    `SqlError` for an unknown column.

    Example:
        >>> read_result_rows(workspace, "trending_ranker", "top_events",  # doctest: +SKIP
        ...                  where={"topic": "sports"}, last=3)
    """
    path = workspace.tables_dir / app / table
    files = _live_files(path, f"{app}.{table}")
    frames = [pq.read_table(path / name) for name in files]
    rows: list[dict[str, Any]] = [
        {column: _plain(value) for column, value in row.items()}
        for row in (
            pa.concat_tables(frames, promote_options="default").to_pylist() if frames else []
        )
    ]
    columns = set(frames[0].column_names) if frames else set()
    for column, value in (where or {}).items():
        if column not in columns:
            raise SqlError(
                f"result table {app}.{table} has no column {column!r}",
                hint=f"its columns: {', '.join(sorted(columns))}",
            )
        rows = [row for row in rows if _text(row[column]) == value]
    if "window_start" in columns:
        rows.sort(key=lambda row: row["window_start"])
        if last is not None:
            kept = sorted({row["window_start"] for row in rows})[-last:] if last > 0 else []
            rows = [row for row in rows if row["window_start"] in set(kept)]
    elif last is not None:
        rows = rows[-last:] if last > 0 else []
    return rows


def _live_files(path: Path, name: str) -> list[str]:
    """The data files of the Delta table at `path` in its latest version, oldest first."""
    log = path / "_delta_log"
    commits = (
        sorted(entry.name for entry in log.iterdir() if _COMMIT.match(entry.name))
        if log.is_dir()
        else []
    )
    if not commits:
        raise ResultTableNotFoundError(
            f"no result table {name} (nothing at {path})",
            hint="check the names; the table appears once the app has written its first results",
        )
    if int(_COMMIT.match(commits[0])[1]) != 0:
        raise SqlError(
            f"result table {name}: its log's first commits were cleaned up",
            hint=f"read it with Spark: `millrace query {name}`",
        )
    live: dict[str, None] = {}
    for commit in commits:
        for line in (log / commit).read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                if action["add"].get("deletionVector"):
                    raise SqlError(
                        f"result table {name} has deletion vectors, which this reader skips",
                        hint=f"read it with Spark: `millrace query {name}`",
                    )
                live[unquote(action["add"]["path"])] = None
            elif "remove" in action:
                live.pop(unquote(action["remove"]["path"]), None)
    return list(live)


def _plain(value: Any) -> Any:
    """`value` as plain Python: times as UTC datetimes (Spark stores UTC instants)."""
    if hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
