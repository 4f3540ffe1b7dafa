"""Delta tables read outside Spark: the rows a scan keeps, the statistics that skip files,
the commit metadata a SQL app's driver reads back, and the tables that cannot be read."""

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import CommitProperties, write_deltalake

from millrace.errors import WarehouseError
from millrace.warehouse.delta import newest_commit_metadata, open_delta_table

MARKER = "millrace:app.table:batch:"


def _append(path: Path, values: list[int], metadata: str | None = None) -> None:
    properties = CommitProperties(custom_metadata={"userMetadata": metadata}) if metadata else None
    write_deltalake(path, pa.table({"x": values}), mode="append", commit_properties=properties)


def test_a_scan_keeps_the_matching_rows_and_the_log_gives_each_files_greatest_value(
    tmp_path: Path,
) -> None:
    table = tmp_path / "table"
    _append(table, [1, 2])
    _append(table, [7, 5])
    snapshot = open_delta_table(table)
    assert snapshot is not None
    assert snapshot.schema.names == ["x"]
    assert sorted(snapshot.scan(ds.field("x") > 1).column("x").to_pylist()) == [2, 5, 7]
    assert sorted(snapshot.file_maxima("x")) == [2, 7]
    assert snapshot.file_maxima("no_such_column") == []


def test_the_newest_marked_commit_is_found_past_the_recent_unmarked_ones(tmp_path: Path) -> None:
    table = tmp_path / "table"
    _append(table, [0], f"{MARKER}3")
    _append(table, [1], f"{MARKER}4")
    # Merges and other writers' commits carry no marker; more of them than the first look reads.
    for value in range(40):
        _append(table, [value])
    assert newest_commit_metadata(table, MARKER) == f"{MARKER}4"
    assert newest_commit_metadata(table, "millrace:other.table:batch:") is None


def test_no_table_is_none_and_an_unreadable_one_is_a_warehouse_error(tmp_path: Path) -> None:
    assert open_delta_table(tmp_path / "nothing") is None
    assert newest_commit_metadata(tmp_path / "nothing", MARKER) is None
    table = tmp_path / "table"
    _append(table, [1])
    (table / "_delta_log" / f"{1:020d}.json").write_text("not json\n")
    with pytest.raises(WarehouseError) as raised:
        open_delta_table(table)
    assert str(table) in raised.value.message and "millrace sql" in (raised.value.hint or "")
