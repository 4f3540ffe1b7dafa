"""Starts of an app that must be refused, from the command line: a second driver, a lost
checkpoint, a corrupt one, an input stream that does not exist; each refused before Spark
starts, with what to do.

The apps run as a user runs them: `millrace deploy` (into the host), `millrace run` in a
terminal (a process of its own), `millrace run --available-now`.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.ops import checkpoints, driver_lock, registry
from millrace.ops.registry import AppRecord
from tests.cli.deployed import WAIT_S, wait_for

APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS n FROM events GROUP BY category;
"""
QUERY = "table.per_category"


def _app(workspace: Workspace, tmp_path: Path, prefix: str) -> tuple[str, Path]:
    """A new app over a stream of its own holding three records: its name and file."""
    run = uuid.uuid4().hex[:8]
    name, stream = f"{prefix}_{run}", f"test.{prefix}.{run}"
    create_stream(workspace.settings, stream)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream))
    with Publisher(stream, settings=workspace.settings) as publisher:
        for second, category in enumerate(["a", "b", "a"]):
            publisher.send({"event_time": f"2026-01-01T00:00:{second:02d}Z", "category": category})
    return name, source


def test_a_second_driver_is_refused_whether_the_first_was_deployed_or_run_in_a_terminal(
    workspace: Workspace,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    name, source = _app(workspace, tmp_path, "drivers")
    deployed = millrace_subprocess("deploy", str(source))
    assert deployed.returncode == 0, deployed.stderr
    assert f"app '{name}' deployed: in the host, pid " in deployed.stdout  # the default
    try:
        record = registry.load(workspace, name)
        # The host's thread for the app keeps the lock `deploy` handed it while its queries run.
        wait_for(
            "the app's queries",
            lambda: f"app '{name}' running: 1 queries" in Path(record.log).read_text(),
            name,
            workspace,
        )
        second = millrace("run", str(source), "--available-now")
        assert second.returncode == 1, second.stdout + second.stderr
        assert second.stderr.startswith(
            f"error[app-running]: app '{name}' is running already: pid {record.pid} on "
        ), second.stderr
        assert "started by `millrace deploy` at " in second.stderr
        assert f"hint: `millrace stop {name}` stops it" in second.stderr
        assert "running" not in second.stdout  # refused before its Spark started
    finally:
        stopped = millrace_subprocess("stop", name)
    assert stopped.returncode == 0, stopped.stderr

    foreground = subprocess.Popen(
        [sys.executable, "-m", "millrace.cli.main", "run", str(source)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while getattr(driver_lock.holder(workspace, name), "pid", None) != foreground.pid:
            assert foreground.poll() is None, "the run in the terminal ended"
            assert time.monotonic() < deadline, "the run in the terminal took no lock"
            time.sleep(0.2)
        refused = millrace("deploy", str(source))
        assert refused.returncode == 1
        assert refused.stderr.startswith(
            f"error[app-running]: app '{name}' is running already: pid {foreground.pid} on "
        ), refused.stderr
        assert "started by `millrace run` at " in refused.stderr
        assert f"`kill {foreground.pid}`" in refused.stderr
        assert registry.load(workspace, name).status == "stopped"  # nothing was started
    finally:
        # Killed, as a machine that dies would leave it: no clean-up of any kind.
        os.killpg(foreground.pid, signal.SIGKILL)
        foreground.wait()
    assert driver_lock.holder(workspace, name) is None


def test_a_lost_or_corrupt_checkpoint_is_refused_with_the_way_out(
    workspace: Workspace,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    name, source = _app(workspace, tmp_path, "restarts")
    # A new app starts without a flag.
    first = millrace("run", str(source), "--available-now")
    assert first.returncode == 0, first.stderr
    checkpoint = workspace.checkpoint(name, QUERY)
    last = max(batch.batch_id for batch in checkpoints.history(workspace, name))

    # A crash left the next batch's offsets file unreadable.
    corrupt = checkpoint / "offsets" / str(last + 1)
    corrupt.write_bytes(b"v1\n\x93\xffbinary")
    said = (
        f"error[checkpoint-corrupt]: checkpoint file {corrupt} (batch {last + 1} of query "
        f"{QUERY} of app '{name}') cannot be read: it is not text (byte 3 is 0x93)"
    )
    rollback = f"`millrace rollback {name} --to-batch {last}`"
    registry.save(
        workspace,
        AppRecord(name, "sql", str(source), "", checkpoint=str(checkpoint.parent), log="/x"),
    )
    try:
        for command in (["history", name], ["run", str(source), "--available-now"], ["ps"]):
            refused = millrace(*command)
            assert refused.returncode == 1, command
            assert said in refused.stderr and rollback in refused.stderr, refused.stderr
            assert "Traceback" not in refused.stderr
        assert name in refused.stdout  # `ps` lists it all the same, the error after the list
        rolled = millrace("rollback", name, "--to-batch", str(last), "--no-start")
        assert rolled.returncode == 0, rolled.stderr
        assert f"{QUERY}: back to batch {last}, 1 later batches removed" in rolled.stdout
    finally:
        (workspace.app_record(name)).unlink()
    assert millrace("history", name).returncode == 0

    # The query's checkpoint deleted: a run would start over and write everything again.
    shutil.rmtree(checkpoint)
    for command in (["run", str(source), "--available-now"], ["deploy", str(source)]):
        refused = millrace(*command)
        assert refused.returncode == 1, command
        assert refused.stderr.startswith(
            f"error[checkpoint-missing]: app '{name}' has run before"
        ), refused.stderr
        assert f"the checkpoint of query {QUERY} is missing" in refused.stderr
        assert "start the app with --fresh" in refused.stderr
        assert f"`millrace rollback {name} --to-batch N`" in refused.stderr
    assert not (workspace.app_record(name)).exists()  # deploy started none

    fresh = millrace("run", str(source), "--available-now", "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    moved = Path(fresh.stdout.split("the checkpoint was moved to ")[1].splitlines()[0])
    assert moved.parent == workspace.backups(name) and moved.is_dir()
    assert checkpoints.history(workspace, name)[0].batch_id == 0
    ledger = json.loads((workspace.checkpoint_ledger(name)).read_text())
    assert QUERY in ledger["queries"]


def test_an_app_whose_input_stream_does_not_exist_is_refused_before_spark_starts(
    workspace: Workspace, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    name, stream = f"unread_{uuid.uuid4().hex[:8]}", f"test.never-made.{uuid.uuid4().hex[:8]}"
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream))
    batch = ["--batch", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]
    for command in (["run", str(source), "--available-now"], ["run", str(source), *batch]):
        refused = millrace(*command)
        assert refused.returncode == 1, command
        assert refused.stderr.startswith(
            f"error[sql]: {source}:3:1: input stream {stream!r} does not exist"
        ), refused.stderr
        assert f"`millrace stream create {stream}`" in refused.stderr
        # Nothing started: a run says its queries' start first.
        assert refused.stdout == "", refused.stdout
