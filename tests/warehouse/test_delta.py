"""Delta tables read outside Spark: the rows a scan keeps, the statistics that skip files,
the commit metadata a SQL app's driver reads back, the tables that cannot be read, and a
process that read a table under `s3a://` ending as it should."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import CommitProperties, write_deltalake

from millrace.config.settings_loader import load_settings
from millrace.config.storage import delta_storage_options
from millrace.config.workspace import Workspace, init_workspace
from millrace.errors import WarehouseError
from millrace.warehouse.delta import newest_commit_metadata, open_delta_table
from tests.s3_stand_in import S3StandIn

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


def test_millrace_query_of_a_table_under_s3a_prints_its_rows_and_exits_cleanly_every_time(
    s3_stand_in: S3StandIn, tmp_path: Path
) -> None:
    """With delta-rs's own filesystem handed to pyarrow, pyarrow's threads still reading
    ahead when the process ended called into the finalizing interpreter: `millrace query`
    printed its rows, then aborted ("terminate called without an active exception") in
    about one run of five."""
    prefix = f"delta-{uuid.uuid4().hex[:8]}"
    variables = s3_stand_in.environment(prefix)
    environment = {**os.environ, "MILLRACE_HOME": str(tmp_path / "ws"), **variables}
    init_workspace(Workspace.locate(environment))
    options = delta_storage_options(load_settings(None, variables))
    rows = pa.table({"category": [f"c{n}" for n in range(7)], "n": list(range(7))})
    for _ in range(3):  # a table of several files, as a running app leaves
        write_deltalake(
            f"s3://{s3_stand_in.bucket}/{prefix}/tables/app/counts",
            rows,
            mode="append",
            storage_options={**options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"},
        )
    for _ in range(10):
        printed = subprocess.run(
            [sys.executable, "-m", "millrace.cli.main", "query", "app.counts"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
            check=False,
        )
        assert printed.returncode == 0, printed.stderr
        assert len([json.loads(line) for line in printed.stdout.splitlines()]) == 21
