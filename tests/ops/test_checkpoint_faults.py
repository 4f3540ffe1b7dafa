"""Checkpoints that are not as they should be, without Spark: corrupt log files, lost ones.

The logs are laid out as Spark writes them (`offsets/N`: a version line, the batch's metadata
as JSON, a line of offsets per input; `commits/N`: a version line and JSON). Each corrupt
file is what a crash or a full disk leaves, and each used to end in a raw traceback:
`UnicodeDecodeError`, `JSONDecodeError`, or an `IndexError` for a file cut after its first
line.
"""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from millrace.config.workspace import Workspace
from millrace.errors import CheckpointCorruptError, CheckpointMissingError
from millrace.ops import checkpoints, lifecycle
from millrace.ops.checkpoints import app_checkpoints

BATCHES = 4


def _log(workspace: Workspace, app: str, query: str, batches: int = BATCHES) -> Path:
    root = workspace.checkpoint(app, query)
    for batch in range(batches):
        header = {"batchWatermarkMs": 0, "batchTimestampMs": 1_000 * batch, "conf": {}}
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "offsets" / str(batch)).write_text(
            f"v1\n{json.dumps(header)}\n{json.dumps({'in': {'0': 10 * (batch + 1)}})}"
        )
        (root / "commits").mkdir(exist_ok=True)
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


CORRUPT = {
    "not text": (b"v1\n\xff\xfe\x00garbage", "it is not text (byte 3 is 0xff)"),
    "bad json": (b'v1\n{"batchWatermarkMs":0,', "line 2 is not the batch's metadata as JSON"),
    "cut after the version": (b"v1\n", "it ends after its version line"),
    "empty": (b"", "it is empty"),
    "no version": (b'{"a": 1}\n{}', "its first line is '{\"a\": 1}', not Spark's log version"),
    "bad offsets": (b'v1\n{}\n{"in": {"0": 1', "line 3 is not an input's offsets as JSON"),
}


@pytest.mark.parametrize("content, reason", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_offsets_file_is_named_with_what_is_wrong_and_the_batch_to_roll_back_to(
    fresh_workspace: Workspace, content: bytes, reason: str
) -> None:
    root = _log(fresh_workspace, "app", "table.t")
    bad = root / "offsets" / str(BATCHES - 1)
    bad.write_bytes(content)
    for read in (checkpoints.history, checkpoints.last_batches, checkpoints.verify):
        with pytest.raises(CheckpointCorruptError) as corrupt:
            read(fresh_workspace, "app")
        assert corrupt.value.code == "checkpoint-corrupt"
        assert corrupt.value.message.startswith(
            f"checkpoint file {bad} (batch {BATCHES - 1} of query table.t of app 'app') "
            f"cannot be read: {reason}"
        )
        assert f"`millrace rollback app --to-batch {BATCHES - 2}`" in corrupt.value.hint
    # The monitor reads what it can: the query's offsets are unknown, nothing raises.
    [query] = app_checkpoints(fresh_workspace, "app")
    assert query.batch_id == BATCHES - 1 and query.offsets == {}


def test_a_corrupt_commit_file_and_a_first_batch_that_cannot_be_read(
    fresh_workspace: Workspace,
) -> None:
    root = _log(fresh_workspace, "app", "table.t")
    (root / "commits" / "2").write_bytes(b"\x00\x00\x00")
    with pytest.raises(CheckpointCorruptError) as corrupt:
        checkpoints.history(fresh_workspace, "app")
    assert f"checkpoint file {root / 'commits' / '2'} (batch 2" in corrupt.value.message
    assert "`millrace rollback app --to-batch 1`" in corrupt.value.hint

    (root / "offsets" / "0").write_text("v1")
    (root / "offsets" / "1").write_text("v1")
    with pytest.raises(CheckpointCorruptError) as corrupt:
        checkpoints.history(fresh_workspace, "app")
    assert "no batch of query table.t before it can be read" in corrupt.value.hint
    assert "`millrace restart app --fresh`" in corrupt.value.hint


def test_an_app_run_in_a_terminal_is_rolled_back_past_a_corrupt_file(
    fresh_workspace: Workspace,
) -> None:
    root = _log(fresh_workspace, "app", "table.t")
    (root / "offsets" / "3").write_bytes(b"\xff")
    done = lifecycle.rollback(fresh_workspace, "app", to_batch=2)
    assert done.record is None and done.rollback.removed_batches == {"table.t": [3]}
    assert (done.rollback.backup / "table.t" / "offsets" / "3").read_bytes() == b"\xff"
    assert [batch.batch_id for batch in checkpoints.history(fresh_workspace, "app")] == [0, 1, 2]


def test_queries_that_ran_are_remembered_and_a_lost_checkpoint_is_refused(
    fresh_workspace: Workspace,
) -> None:
    queries = ["insert.out", "table.t"]
    # A new app, and one that ran but committed nothing, start without a word.
    checkpoints.require_checkpoints(fresh_workspace, "app", queries, ["t"])
    _log(fresh_workspace, "app", "insert.out", batches=0)
    checkpoints.remember(fresh_workspace, "app")
    checkpoints.require_checkpoints(fresh_workspace, "app", queries, ["t"])

    _log(fresh_workspace, "app", "insert.out")
    _log(fresh_workspace, "app", "table.t")
    checkpoints.remember(fresh_workspace, "app")
    ledger = fresh_workspace.checkpoint_ledger("app")
    assert set(json.loads(ledger.read_text())["queries"]) == set(queries)

    shutil.rmtree(fresh_workspace.checkpoints_dir / "app")
    with pytest.raises(CheckpointMissingError) as missing:
        checkpoints.require_checkpoints(fresh_workspace, "app", queries, ["t"])
    assert missing.value.code == "checkpoint-missing"
    assert "the checkpoints of queries insert.out, table.t are missing" in missing.value.message
    assert f"({ledger} records their committed batches)" in missing.value.message
    assert "reads its inputs from the start again" in missing.value.message
    assert "start the app with --fresh" in missing.value.hint
    assert "`millrace rollback app --to-batch N`" in missing.value.hint
    # A query no longer in the code may have lost its checkpoint.
    checkpoints.require_checkpoints(fresh_workspace, "app", ["insert.new"], [])
    # Starting over on purpose forgets them.
    lifecycle.start_over(fresh_workspace, "app")
    checkpoints.require_checkpoints(fresh_workspace, "app", queries, ["t"])


def test_an_app_without_a_record_of_its_queries_is_judged_by_its_result_tables(
    fresh_workspace: Workspace,
) -> None:
    write_deltalake(str(fresh_workspace.result_table("app", "t")), pa.table({"n": [1]}))
    with pytest.raises(CheckpointMissingError, match=r"the checkpoint of query table\.t is"):
        checkpoints.require_checkpoints(fresh_workspace, "app", ["table.t", "insert.x"], ["t"])
    _log(fresh_workspace, "app", "table.t")
    checkpoints.require_checkpoints(fresh_workspace, "app", ["table.t", "insert.x"], ["t"])
