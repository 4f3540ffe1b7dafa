"""What the monitor reads from an app's checkpoints: each query's newest committed batch and
the offsets it reached, per stream and bucket, and nothing it cannot read."""

import json

from millrace.config.workspace import Workspace
from millrace.ops.checkpoints import app_checkpoints, app_names


def _batch(workspace: Workspace, query: str, batch: int, offsets: str, commit: bool) -> None:
    folder = workspace.checkpoint("counter", query)
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "commits").mkdir(exist_ok=True)
    (folder / "offsets" / str(batch)).write_text(f"v1\n{json.dumps({'conf': {}})}\n{offsets}")
    if commit:
        (folder / "commits" / str(batch)).write_text("v1\n{}")


def test_each_query_reports_its_newest_committed_batch_and_its_offsets(
    fresh_workspace: Workspace,
) -> None:
    # One source per bucket of a stream: their offsets are put together.
    _batch(fresh_workspace, "table.t", 0, '{"clicks":{"0":4}}\n{"clicks":{"1":2}}', commit=True)
    _batch(fresh_workspace, "table.t", 1, '{"clicks":{"0":9}}\n{"clicks":{"1":5}}', commit=True)
    _batch(fresh_workspace, "table.t", 2, '{"clicks":{"0":12}}\n{"clicks":{"1":7}}', commit=False)
    _batch(fresh_workspace, "insert.i", 0, '{"clicks":', commit=True)  # cut short by a crash
    (fresh_workspace.checkpoint("counter", "insert.i").parent / "_dead_letters").mkdir()

    assert app_names(fresh_workspace) == ["counter"]
    by_query = {c.query: c for c in app_checkpoints(fresh_workspace, "counter")}
    assert sorted(by_query) == ["insert.i", "table.t"]
    assert by_query["table.t"].batch_id == 1
    assert by_query["table.t"].offsets == {"clicks": {0: 9, 1: 5}}
    assert by_query["insert.i"].batch_id == 0 and by_query["insert.i"].offsets == {}
    assert app_checkpoints(fresh_workspace, "no_such_app") == []
