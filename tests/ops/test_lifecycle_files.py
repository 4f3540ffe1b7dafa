"""The lifecycle's file work without Spark: registry records, checkpoint logs, fingerprints.

Checkpoints here are laid out as Spark 4.2 writes them for a RocksDB aggregation (seen in
the checkpoints of `tests/cli/test_lifecycle.py`): `offsets/N`, `commits/N`, `state/0/<p>/
V.zip` snapshots named by state version (batch + 1), shared `SSTs/`, and `_metadata/`.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from millrace import Input, Processor, ValueState
from millrace.apps.declarations import Declared
from millrace.apps.options import RunOptions
from millrace.apps.processors.placement import DEFAULT_BUCKETS, Placement
from millrace.apps.state_schema import (
    check_state,
    processor_fingerprint,
    processor_placement,
    record_state,
    sql_fingerprint,
)
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import (
    AlreadyDeployedError,
    CheckpointCorruptError,
    ConfigError,
    LifecycleError,
    StateSchemaError,
)
from millrace.ops import checkpoints, lifecycle, registry
from millrace.ops.registry import AppRecord
from millrace.sql.parser import parse_app

BATCHES = 5


def _checkpoint(workspace: Workspace, app: str, query: str) -> Path:
    root = workspace.checkpoint(app, query)
    for batch in range(BATCHES):
        offsets = {"batchWatermarkMs": 0, "batchTimestampMs": 1_000 * batch, "conf": {}}
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "offsets" / str(batch)).write_text(
            f"v1\n{json.dumps(offsets)}\n{json.dumps({'in': {'0': 10 * (batch + 1)}})}"
        )
        (root / "offsets" / f".{batch}.crc").write_text("crc")
        (root / "commits").mkdir(exist_ok=True)
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        for partition in ("0", "1"):
            store = root / "state" / "0" / partition
            (store / "SSTs").mkdir(parents=True, exist_ok=True)
            (store / f"{batch + 1}.zip").write_text("snapshot")
            (store / f".{batch + 1}.zip.crc").write_text("crc")
            (store / "SSTs" / f"{batch:06d}-x.sst").write_text("sst")
            (store / "_metadata").mkdir(exist_ok=True)
            (store / "_metadata" / "schema").write_text("schema")
    return root


def test_history_reads_each_batch_and_rollback_moves_later_batches_and_state_aside(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    root = _checkpoint(fresh_workspace, "app", "table.t")
    batches = checkpoints.history(fresh_workspace, "app")
    assert [(b.query, b.batch_id) for b in batches] == [("table.t", n) for n in range(BATCHES)]
    assert batches[2].offsets == [{"in": {"0": 30}}] and batches[2].started_ms == 2_000

    backup = tmp_path / "backup"
    done = checkpoints.rollback(fresh_workspace, "app", {"table.t": 2}, backup)
    assert done.removed_batches == {"table.t": [3, 4]}
    assert sorted(p.name for p in (root / "offsets").iterdir()) == [
        ".0.crc",
        ".1.crc",
        ".2.crc",
        "0",
        "1",
        "2",
    ]
    assert sorted(p.name for p in (root / "commits").iterdir()) == ["0", "1", "2"]
    for partition in ("0", "1"):
        store = root / "state" / "0" / partition
        # State version 3 is the state after batch 2: kept, with the shared SST files.
        assert sorted(p.name for p in store.glob("*.zip")) == ["1.zip", "2.zip", "3.zip"]
        assert len(list((store / "SSTs").iterdir())) == BATCHES
        assert (store / "_metadata" / "schema").is_file()
        assert sorted(p.name for p in (backup / "table.t/state/0" / partition).glob("*.zip")) == [
            "4.zip",
            "5.zip",
        ]
    assert (backup / "table.t/offsets/.4.crc").is_file()

    with pytest.raises(LifecycleError, match="has no committed batch 7"):
        checkpoints.rollback(fresh_workspace, "app", {"table.t": 7}, backup)
    # Before the first batch: the whole checkpoint goes aside.
    checkpoints.rollback(fresh_workspace, "app", {"table.t": -1}, tmp_path / "all")
    assert not root.exists() and (tmp_path / "all" / "table.t" / "offsets" / "0").is_file()


def test_batch_at_picks_the_last_batch_committed_by_a_time(fresh_workspace: Workspace) -> None:
    root = _checkpoint(fresh_workspace, "app", "table.t")
    for batch in range(BATCHES):
        os.utime(root / "commits" / str(batch), (100 + batch, 100 + batch))
    batches = checkpoints.history(fresh_workspace, "app")
    assert checkpoints.batch_at(batches, 102_500) == {"table.t": 2}
    assert checkpoints.batch_at(batches, 50_000) == {"table.t": -1}


def test_an_app_whose_process_is_gone_is_crashed_unless_it_recorded_its_exit(
    fresh_workspace: Workspace,
) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    record = AppRecord(
        "gone",
        "sql",
        "/x.sql",
        "",
        checkpoint="/c",
        log="/l",
        pid=int(ended.stdout),
        status="running",
    )
    registry.save(fresh_workspace, record)
    assert registry.load(fresh_workspace, "gone").status == "crashed"
    registry.record_exit(fresh_workspace, "gone", 0)
    assert registry.load(fresh_workspace, "gone").status == "finished"
    registry.record_exit(fresh_workspace, "gone", 1)
    assert registry.load(fresh_workspace, "gone").status == "crashed"

    import os

    alive = AppRecord(
        "alive",
        "sql",
        "/x.sql",
        "",
        checkpoint="/c",
        log="/l",
        pid=os.getpid(),
        proc_start=registry.process_start(os.getpid()),
        status="running",
    )
    registry.save(fresh_workspace, alive)
    assert [r.status for r in registry.list_apps(fresh_workspace)] == ["running", "crashed"]
    # The same pid started at another time is another process.
    registry.save(fresh_workspace, AppRecord(**{**alive.__dict__, "proc_start": 1}))
    assert registry.load(fresh_workspace, "alive").status == "crashed"
    # The registry's files are plain JSON a person can read.
    saved = json.loads((fresh_workspace.app_record("alive")).read_text())
    assert saved["name"] == "alive" and saved["source"] == "/x.sql"


def test_a_record_written_by_an_older_millrace_is_read_with_its_options(
    fresh_workspace: Workspace,
) -> None:
    older = {
        "name": "older",
        "kind": "sql",
        "source": "/x.sql",
        "source_hash": "ab12",
        "checkpoint": "/c",
        "log": "/l",
        "config": {"trigger": "interval:10s", "master": None, "cwd": "/home/me", "force": True},
        "pid": None,
        "status": "stopped",
    }
    fresh_workspace.app_record("older").parent.mkdir(parents=True)
    fresh_workspace.app_record("older").write_text(json.dumps(older))

    record = registry.load(fresh_workspace, "older")

    assert record.options == RunOptions(Trigger.parse("interval:10s"), force=True)
    assert (record.cwd, record.trigger, record.declared) == ("/home/me", "interval:10s", Declared())


SQL = """CREATE APPLICATION shop;
CREATE INPUT TABLE sales (time, shop, amount) FROM STREAM('sales') TIME time LATENESS '1 minute';
CREATE TABLE per_shop AS SELECT shop, SUM(amount) AS total FROM sales [1 minute] {where}
GROUP BY shop;
"""


def test_a_sql_app_whose_aggregates_change_is_refused_and_a_new_filter_is_not(
    fresh_workspace: Workspace,
) -> None:
    old = sql_fingerprint(parse_app(SQL.format(where=""), "shop.sql"))
    record_state(fresh_workspace, "shop", old)
    (fresh_workspace.checkpoint("shop", "table.per_shop") / "commits").mkdir(parents=True)
    check_state(fresh_workspace, "shop", old)
    filtered = SQL.format(where="WHERE amount > 0")
    check_state(fresh_workspace, "shop", sql_fingerprint(parse_app(filtered, "shop.sql")))

    counted = SQL.format(where="").replace(
        "SUM(amount) AS total", "SUM(amount) AS total, COUNT(*) AS n"
    )
    with pytest.raises(StateSchemaError) as refused:
        check_state(fresh_workspace, "shop", sql_fingerprint(parse_app(counted, "shop.sql")))
    assert 'query table.per_shop: aggregates was ["SUM(amount)"], the new code has ' in (
        refused.value.message
    )
    assert "millrace restart shop --fresh" in refused.value.hint
    rekeyed = SQL.replace("[1 minute]", "[5 minutes]").format(where="")
    with pytest.raises(StateSchemaError, match=r"query table\.per_shop: windows was"):
        check_state(fresh_workspace, "shop", sql_fingerprint(parse_app(rekeyed, "shop.sql")))


class Counts(Processor):
    name = "counts"
    inputs: ClassVar = [Input("events", key="user")]
    seen = ValueState(int)

    def on_record(self, key, record, ctx):
        self.seen.set(self.seen.get(0) + 1)


class CountsAsText(Counts):
    seen = ValueState(str)


def test_a_processor_whose_state_type_changes_is_refused(fresh_workspace: Workspace) -> None:
    record_state(fresh_workspace, "counts", processor_fingerprint(Counts, Placement(8)))
    # No committed batch yet: nothing to carry over, anything starts.
    check_state(fresh_workspace, "counts", processor_fingerprint(CountsAsText, Placement(8)))
    (fresh_workspace.checkpoint("counts", "processor") / "commits").mkdir(parents=True)
    with pytest.raises(StateSchemaError, match=r"states was \{\"seen\": \"ValueState\[int\]\"\}"):
        check_state(fresh_workspace, "counts", processor_fingerprint(CountsAsText, Placement(8)))
    with pytest.raises(StateSchemaError, match="buckets was 8, the new code has 64"):
        check_state(fresh_workspace, "counts", processor_fingerprint(Counts, Placement(64)))


class WideCounts(Counts):
    buckets = 64


def test_a_processor_keeps_the_buckets_its_checkpoint_started_with_unless_it_names_its_own(
    fresh_workspace: Workspace,
) -> None:
    assert processor_placement(fresh_workspace, Counts) == Placement(DEFAULT_BUCKETS, spread=True)
    assert DEFAULT_BUCKETS == 8
    assert processor_placement(fresh_workspace, WideCounts) == Placement(64, spread=True)

    # A checkpoint of a millrace that did not record its fingerprint ran with 64 buckets,
    # grouped by their numbers.
    (fresh_workspace.checkpoint("counts", "processor") / "commits").mkdir(parents=True)
    assert processor_placement(fresh_workspace, Counts) == Placement(64, spread=False)

    record_state(fresh_workspace, "counts", processor_fingerprint(Counts, Placement(8)))
    assert processor_placement(fresh_workspace, Counts) == Placement(8, spread=True)
    # Naming a count other than the checkpoint's is a change of state, refused with its fix.
    with pytest.raises(StateSchemaError, match="buckets was 8, the new code has 64") as refused:
        check_state(
            fresh_workspace,
            "counts",
            processor_fingerprint(WideCounts, processor_placement(fresh_workspace, WideCounts)),
        )
    assert "millrace restart counts --fresh" in refused.value.hint


class CountsByPage(Counts):
    inputs: ClassVar = [Input("events", key=("user", "page"))]


class CountsByPageFunction(Counts):
    inputs: ClassVar = [Input("events", key=lambda record: (record["user"], record["page"]))]


def test_a_processor_keyed_by_several_columns_restarts_and_a_changed_key_is_refused(
    fresh_workspace: Workspace,
) -> None:
    record_state(fresh_workspace, "counts", processor_fingerprint(CountsByPage, Placement(8)))
    (fresh_workspace.checkpoint("counts", "processor") / "commits").mkdir(parents=True)

    check_state(fresh_workspace, "counts", processor_fingerprint(CountsByPage, Placement(8)))

    with pytest.raises(StateSchemaError, match=r'keys was \{"events": \["user", "page"\]\}'):
        check_state(fresh_workspace, "counts", processor_fingerprint(Counts, Placement(8)))


def test_a_key_function_may_become_the_key_columns_it_read(fresh_workspace: Workspace) -> None:
    # A key function cannot be compared: the columns may give every key it gave.
    record_state(
        fresh_workspace, "counts", processor_fingerprint(CountsByPageFunction, Placement(8))
    )
    (fresh_workspace.checkpoint("counts", "processor") / "commits").mkdir(parents=True)

    check_state(fresh_workspace, "counts", processor_fingerprint(CountsByPage, Placement(8)))


def test_triggers_parse_from_their_command_line_form() -> None:
    assert Trigger.parse("micro-batch") == Trigger()
    assert Trigger.parse("interval:10s") == Trigger("interval", "10s")
    assert Trigger.parse("available-now") == Trigger("available-now")
    assert Trigger.parse("real-time") == Trigger("real-time", "5m")
    assert str(Trigger.parse("real-time:1m")) == "real-time:1m"
    for wrong in ("hourly", "interval", "interval:soon", "available-now:1s"):
        with pytest.raises(ConfigError):
            Trigger.parse(wrong)


def test_a_fresh_start_is_seeded_with_the_offsets_of_the_streams_the_old_checkpoint_read(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    old = tmp_path / "old"
    (old / "table.t" / "sources" / "0").mkdir(parents=True)
    (old / "table.t" / "sources" / "0" / "0").write_bytes(b'\0v1\n{"clicks":{"0":0,"1":0}}')
    (old / "dead-letters.clicks").mkdir()
    (old / "dead-letters.clicks" / "routed.json").write_text('{"0": 3, "1": 4}')
    new = tmp_path / "new"
    seeded = checkpoints.seed_start(old, new, lambda stream: {0: 10, 1: 12})
    assert seeded == {"table.t": {"clicks": {0: 10, 1: 12}}}
    written = (new / "table.t" / "sources" / "0" / "0").read_bytes()
    assert written == b'\0v1\n{"clicks": {"0": 10, "1": 12}}'
    assert json.loads((new / "dead-letters.clicks" / "routed.json").read_text()) == {
        "0": 10,
        "1": 12,
    }


def test_a_fresh_start_from_an_old_checkpoint_whose_starting_offsets_are_unreadable_says_so(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old"
    (old / "table.t" / "sources" / "0").mkdir(parents=True)
    (old / "table.t" / "sources" / "0" / "0").write_bytes(b'\0v1\n{"clicks"')
    with pytest.raises(CheckpointCorruptError) as raised:
        checkpoints.seed_start(old, tmp_path / "new", lambda stream: {0: 10})
    assert str(old / "table.t" / "sources" / "0" / "0") in raised.value.message
    assert "(a query's starting offsets) cannot be read: line 2 is not" in raised.value.message
    assert "--fresh" in (raised.value.hint or "")


def test_stream_offsets_at_the_start_the_end_and_a_time(
    workspace: Workspace, stream_name: str
) -> None:
    from millrace.bus.offsets import stream_offsets
    from millrace.bus.publisher import Publisher
    from millrace.bus.streams import create_stream

    create_stream(workspace.settings, stream_name, buckets=1)
    # A time is matched against Kafka's timestamp: when the record reached the bus.
    with Publisher(stream_name, settings=workspace.settings) as publisher:
        for n in range(2):
            publisher.send({"n": n})
    time.sleep(1.5)
    between_ms = int(time.time() * 1000)
    time.sleep(0.5)
    with Publisher(stream_name, settings=workspace.settings) as publisher:
        for n in range(2, 5):
            publisher.send({"n": n})
    assert stream_offsets(workspace.settings, stream_name, "earliest") == {0: 0}
    assert stream_offsets(workspace.settings, stream_name, "latest") == {0: 5}
    assert stream_offsets(workspace.settings, stream_name, between_ms) == {0: 2}
    assert stream_offsets(workspace.settings, stream_name, between_ms + 3_600_000) == {0: 5}


def test_deploying_an_app_that_runs_deployed_already_names_it_in_the_error(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    source = tmp_path / "twice.sql"
    source.write_text(
        "CREATE APPLICATION twice;\n"
        "CREATE INPUT TABLE events (page STRING) FROM STREAM('clicks') TIME time;\n"
        "INSERT INTO STREAM('pages') SELECT page FROM events;\n"
    )
    here = os.getpid()
    running = AppRecord(
        "twice",
        "sql",
        str(source),
        "",
        checkpoint="/c",
        log="/l",
        pid=here,
        proc_start=registry.process_start(here),
        status="running",
    )
    registry.save(fresh_workspace, running)

    # The demo stops a deployment left running by the app this error names, and deploys again.
    with pytest.raises(AlreadyDeployedError, match="already runs") as raised:
        lifecycle.deploy(fresh_workspace, str(source))
    assert raised.value.app == "twice"


def test_an_app_name_too_long_for_a_file_name_is_not_deployed_rather_than_an_os_error(
    fresh_workspace: Workspace,
) -> None:
    # Found by the API's schema test: a name of over 255 bytes in UTF-8.
    name = "İ" * 200

    assert not registry.is_deployed(fresh_workspace, name)
    with pytest.raises(registry.AppNotFoundError, match="no deployed app"):
        registry.load(fresh_workspace, name)
