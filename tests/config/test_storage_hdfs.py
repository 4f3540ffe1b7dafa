"""A storage root under `hdfs://` (Hadoop's MiniDFSCluster on loopback: a real NameNode and
DataNode): paths there read, written, listed and moved as paths are; an unreachable namenode
told within seconds; a Delta table there scanned as on the disk, and printed by `millrace
query`, which exits cleanly every time; and an app that keeps its checkpoint and result table
there, rolled back and restarted, read back by `millrace query`, `history` and the HTTP
results with the answer computed from the events, and by the monitor's view of the app."""

import functools
import json
import os
import subprocess
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import write_deltalake

from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.config.settings_loader import load_settings
from millrace.config.storage import storage_root
from millrace.config.workspace import Workspace, init_workspace
from millrace.errors import StorageError
from millrace.warehouse.delta import DeltaSnapshot, open_delta_table
from tests.config.storage_apps import (
    APP,
    EVENTS,
    QUERY,
    app_events,
    publish,
    read_back_answer,
    run_millrace,
    shared_workspace,
)
from tests.hdfs_cluster import HdfsCluster
from tests.ports import free_port


def test_a_namenode_that_does_not_answer_is_a_storage_error_within_seconds() -> None:
    settings = Settings(storage_root=f"hdfs://127.0.0.1:{free_port()}/prod")
    started = time.monotonic()
    with pytest.raises(StorageError) as raised:
        (storage_root(Path("/unused"), settings) / "checkpoints").is_dir()
    assert time.monotonic() - started < 10
    assert "cannot reach hdfs://127.0.0.1:" in raised.value.message
    assert "namenode" in (raised.value.hint or "")


def test_a_delta_table_under_hdfs_is_scanned_as_the_same_table_on_the_disk_is(
    hdfs_cluster: HdfsCluster, tmp_path: Path
) -> None:
    prefix = f"delta-{uuid.uuid4().hex[:8]}"
    root = storage_root(Path("/unused"), load_settings(None, hdfs_cluster.environment(prefix)))
    windows = [datetime(2026, 1, 1, 0, minute, tzinfo=UTC) for minute in range(6)]
    rows = pa.table({"window_start": windows, "category": ["a", "b"] * 3, "n": range(6)})
    for where in (str(root / "per_minute"), str(tmp_path / "per_minute")):
        write_deltalake(where, rows.slice(0, 3))
        write_deltalake(where, rows.slice(3), mode="append")

    remote = open_delta_table(root / "per_minute")
    local = open_delta_table(tmp_path / "per_minute")
    assert remote is not None and local is not None
    assert remote.schema == local.schema

    def recent(snapshot: DeltaSnapshot) -> pa.Table:
        since = ds.field("window_start") >= windows[2]
        return snapshot.scan(since, columns=["window_start", "n"]).sort_by("window_start")

    assert recent(remote) == recent(local)
    assert recent(remote)["n"].to_pylist() == [2, 3, 4, 5]
    assert remote.scan().num_rows == 6


def test_millrace_query_of_a_table_under_hdfs_prints_its_rows_and_exits_cleanly_every_time(
    hdfs_cluster: HdfsCluster, tmp_path: Path
) -> None:
    """Read through a pyarrow filesystem of Python callbacks (delta-rs's, or hdfs-native's
    fsspec one), `millrace query` printed its rows, then aborted at exit ("terminate called
    without an active exception") in 19 and 6 runs of 30."""
    prefix = f"query-{uuid.uuid4().hex[:8]}"
    environment = {**os.environ, "MILLRACE_HOME": str(tmp_path / "ws")}
    environment |= hdfs_cluster.environment(prefix)
    init_workspace(Workspace.locate(environment))
    rows = pa.table({"category": [f"c{n}" for n in range(7)], "n": list(range(7))})
    for _ in range(3):  # a table of several files, as a running app leaves
        write_deltalake(f"{hdfs_cluster.url}/{prefix}/tables/app/counts", rows, mode="append")
    for _ in range(10):
        printed = run_millrace(environment, "query", "app.counts")
        assert printed.returncode == 0, printed.stderr
        assert len([json.loads(line) for line in printed.stdout.splitlines()]) == 21


def _batches(listed: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def _events_read(batch: dict[str, Any], stream: str) -> int:
    """How many events of `stream` the app had read at the end of `batch`: the sum of its end
    offsets (one source a bucket, beside the app's ticks)."""
    ends = [offsets[stream] for offsets in batch["offsets"] if stream in offsets]
    return sum(offset for end in ends for offset in end.values())


@pytest.mark.timeout(600)  # three Spark runs of an app
def test_an_app_keeps_its_checkpoint_and_results_under_hdfs_through_rollback_and_restart(
    workspace: Workspace, hdfs_cluster: HdfsCluster, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    name, stream, prefix = f"hdfs_{run}", f"test.hdfs.{run}", f"apps-{run}"
    environment = shared_workspace(workspace, hdfs_cluster.environment(prefix), tmp_path)
    shared = Workspace.locate(environment)
    create_stream(shared.settings, stream, buckets=2)
    events = app_events()
    expected = Counter(event["category"] for event in events)
    app = tmp_path / "app.sql"
    app.write_text(APP.format(name=name, stream=stream))
    millrace = functools.partial(run_millrace, environment)

    publish(shared, stream, events[: EVENTS // 2])
    first = millrace("run", str(app), "--available-now")
    assert first.returncode == 0, first.stderr
    first_batch = _batches(millrace("history", name, "--json"))[-1]
    assert first_batch["committed"] and _events_read(first_batch, stream) == EVENTS // 2

    publish(shared, stream, events[EVENTS // 2 :])
    second = millrace("run", str(app), "--available-now")
    assert second.returncode == 0, second.stderr
    batches = _batches(millrace("history", name, "--json"))
    assert all(batch["committed"] for batch in batches) and {b["query"] for b in batches} == {QUERY}
    assert _events_read(batches[-1], stream) == EVENTS

    rolled = millrace("rollback", name, "--to-batch", str(first_batch["batch"]))
    assert rolled.returncode == 0, rolled.stderr
    assert f"{QUERY}: back to batch {first_batch['batch']}" in rolled.stdout
    assert f"backup: {hdfs_cluster.url}/{prefix}/backups/{name}/" in rolled.stdout
    assert _batches(millrace("history", name, "--json"))[-1] == first_batch

    restarted = millrace("run", str(app), "--available-now")
    assert restarted.returncode == 0, restarted.stderr
    read_back_answer(environment, name, stream, expected)

    stored = hdfs_cluster.files(prefix)
    assert f"/{prefix}/checkpoints/{name}/{QUERY}/commits/0" in stored
    assert any(
        path.startswith(f"/{prefix}/tables/{name}/per_category/_delta_log/") for path in stored
    )
    assert not (shared.root / "checkpoints" / name).exists()  # nothing on the local disk
    assert not (shared.root / "tables").exists()
