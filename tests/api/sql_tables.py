"""Result tables for the query tests, written with delta-rs as a SQL app leaves them: orders
per minute and region, whose rows the tests also hold in plain Python to compute their own
answers, and a table of numbers big enough to cross-join past a time limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
from deltalake import write_deltalake

from millrace.config.workspace import Workspace
from millrace.warehouse.result_tables import TableRow

APP, TABLE = "checkout", "orders_per_minute"
VIEW = f"{APP}__{TABLE}"
"""The name queries read the orders table by."""
NUMBERS = "checkout__numbers"
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
REGIONS = ("eu", "us")
MINUTES = 30

_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("region", pa.string()),
        ("orders", pa.int64()),
        ("revenue", pa.float64()),
    ]
)


def orders_rows() -> list[TableRow]:
    """The orders table's rows: each minute's orders and revenue in each region, uneven."""
    rows = []
    for minute in range(MINUTES):
        start = START + timedelta(minutes=minute)
        for n, region in enumerate(REGIONS):
            orders = 10 + (minute * 7 + n * 13) % 17 + minute // 3
            rows.append(
                {
                    "window_start": start,
                    "window_end": start + timedelta(minutes=1),
                    "region": region,
                    "orders": orders,
                    "revenue": orders * 12.5 + n * 0.25,
                }
            )
    return rows


def write_orders_table(workspace: Workspace) -> list[TableRow]:
    """The orders table in `workspace`, one Delta commit per ten minutes; its rows."""
    rows = orders_rows()
    per_commit = 10 * len(REGIONS)
    for first in range(0, len(rows), per_commit):
        chunk = pa.Table.from_pylist(rows[first : first + per_commit], schema=_SCHEMA)
        write_deltalake(str(workspace.result_table(APP, TABLE)), chunk, mode="append")
    return rows


def write_numbers_table(workspace: Workspace, count: int = 2_000) -> None:
    """A table of the numbers 0 to `count - 1`, as `checkout__numbers`."""
    numbers = pa.table({"n": pa.array(range(count), type=pa.int64())})
    write_deltalake(str(workspace.result_table(APP, "numbers")), numbers)
