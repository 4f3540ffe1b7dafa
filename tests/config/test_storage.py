"""The storage root: where checkpoints, result tables and the warehouse live, on the workspace's
disk or under an `s3a://` URI (moto's server standing in for S3) or an `hdfs://` one, where
paths are read, written, listed and moved as paths are (more of HDFS: test_storage_hdfs.py);
and apps that keep them under `s3a://` run, killed with kill -9, restarted, rolled back and
read from there."""

import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.settings import Settings
from millrace.config.settings_loader import load_settings
from millrace.config.storage import RemotePath, listing, move, storage_root, write_whole
from millrace.config.workspace import Workspace
from millrace.engine.delivery import AtMostOnce
from millrace.engine.session import spark_config
from millrace.errors import ConfigError, StorageError
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
from tests.s3_stand_in import S3StandIn


def test_the_storage_root_is_the_workspace_unless_storage_root_names_another(
    tmp_path: Path,
) -> None:
    workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path / "ws")})
    assert workspace.checkpoint("app", "q") == tmp_path / "ws" / "checkpoints" / "app" / "q"

    shared = tmp_path / "shared"
    moved = Workspace.locate(
        {"MILLRACE_HOME": str(tmp_path / "ws"), "MILLRACE_STORAGE_ROOT": shared.as_uri()}
    )
    assert moved.checkpoint("app", "q") == shared / "checkpoints" / "app" / "q"
    assert moved.tables_dir == shared / "tables"
    assert moved.logs_dir == tmp_path / "ws" / "logs"  # the workspace's own files stay


@pytest.mark.parametrize(
    ("root", "complaint"),
    [
        ("s3://data/prod", "Hadoop's S3 connector is s3a://"),
        ("abfss://data@account.dfs.core.windows.net/prod", "is not an s3a://, hdfs:// or file://"),
        ("s3a:///prod", "names no bucket"),
        ("hdfs:///prod", "names no namenode"),
        ("file://shared/prod", "is not an absolute file URI"),
        ("s3a://data/prod?versioned=1", "has a query or fragment"),
    ],
)
def test_a_storage_root_millrace_cannot_reach_is_refused_naming_its_source(
    root: str, complaint: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, {"MILLRACE_STORAGE_ROOT": root})
    assert complaint in raised.value.message
    assert "MILLRACE_STORAGE_ROOT" in raised.value.message
    assert "s3a://bucket/prefix" in (raised.value.hint or "")


def test_spark_reaches_a_custom_endpoint_path_style_and_never_gets_the_keys_on_its_command_line(
    tmp_path: Path,
) -> None:
    secret_file = tmp_path / "s3-secret"
    secret_file.write_text("s3cret-key\n")
    settings = load_settings(
        tmp_path / "millrace.toml",
        {
            "MILLRACE_STORAGE_ROOT": "s3a://data/prod/",
            "MILLRACE_S3_ENDPOINT": "http://127.0.0.1:9000",
            "MILLRACE_S3_ACCESS_KEY": "AKIAEXAMPLE",
            "MILLRACE_S3_SECRET_KEY_FILE": str(secret_file),
        },
    )
    assert settings.storage_root == "s3a://data/prod"
    assert settings.s3_secret == "s3cret-key"
    launched = spark_config(settings)
    assert {key: value for key, value in launched.items() if ".s3a." in key} == {
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.optimized.copy.from.local.enabled": "false",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    # PySpark starts the JVM with these settings as arguments, which `ps` shows.
    command_line = json.dumps(launched)
    assert "s3cret-key" not in command_line and "AKIAEXAMPLE" not in command_line
    assert "s3cret-key" not in repr(settings)


@pytest.fixture(params=["s3_stand_in", "hdfs_cluster"])
def remote_store(request: pytest.FixtureRequest) -> S3StandIn | HdfsCluster:
    """Each remote store a storage root may be on: S3 (moto's stand-in) and HDFS."""
    store: S3StandIn | HdfsCluster = request.getfixturevalue(request.param)
    return store


def test_paths_under_a_remote_root_are_read_written_listed_and_moved_as_paths_are(
    remote_store: S3StandIn | HdfsCluster,
) -> None:
    prefix = f"paths-{uuid.uuid4().hex[:8]}"
    settings = load_settings(None, remote_store.environment(prefix))
    root = storage_root(Path("/unused"), settings)
    assert isinstance(root, RemotePath)
    assert str(root / "checkpoints") == f"{remote_store.uri(prefix)}/checkpoints"

    offsets = root / "checkpoints" / "app" / "q" / "offsets"
    assert not offsets.exists() and not offsets.is_dir() and list(offsets.iterdir()) == []
    for batch in ("0", "1", "10"):
        (offsets / batch).write_text(f"v1\n{batch}\n")
    assert offsets.is_dir() and (offsets / "1").is_file()
    assert sorted(path.name for path in offsets.iterdir()) == ["0", "1", "10"]
    assert sorted(path.name for path in (root / "checkpoints").glob("*/*/offsets")) == ["offsets"]
    assert (offsets / "10").read_text() == "v1\n10\n"
    assert (offsets / "10").stat().st_size == len("v1\n10\n")
    with pytest.raises(FileNotFoundError):
        (offsets / "2").read_text()

    write_whole(offsets / "pending.json", '{"a": 1}')
    write_whole(offsets / "pending.json", '{"a": 2}')  # the new text over the old, whole
    assert (offsets / "pending.json").read_text() == '{"a": 2}'
    assert [path.name for path in listing(offsets)] == ["0", "1", "10", "pending.json"]

    move(root / "checkpoints" / "app", root / "backups" / "app")
    assert not (root / "checkpoints" / "app").exists()
    assert remote_store.stored(f"{prefix}/backups") == [
        f"app/q/offsets/{name}" for name in ("0", "1", "10", "pending.json")
    ]


def test_an_s3_endpoint_that_does_not_answer_is_a_storage_error_within_seconds() -> None:
    settings = Settings(
        storage_root="s3a://data/prod",
        storage_s3_endpoint=f"http://127.0.0.1:{free_port()}",
        storage_s3_access_key="AKIAEXAMPLE",
        storage_s3_secret_key="s3cret-key",
    )
    started = time.monotonic()
    with pytest.raises(StorageError) as raised:
        (storage_root(Path("/unused"), settings) / "checkpoints").is_dir()
    assert time.monotonic() - started < 30
    assert "cannot reach s3a://data/prod/checkpoints" in raised.value.message
    assert "s3cret-key" not in raised.value.render()


@pytest.mark.timeout(1200)  # two Spark runs of an app whose every file goes through moto
def test_an_app_keeps_its_checkpoint_and_results_under_s3a_through_kill_9_and_rollback(
    workspace: Workspace, s3_stand_in: S3StandIn, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    name, stream, prefix = f"s3_{run}", f"test.s3.{run}", f"apps-{run}"
    environment = shared_workspace(workspace, s3_stand_in.environment(prefix), tmp_path)
    shared = Workspace.locate(environment)
    create_stream(shared.settings, stream, buckets=2)
    events = app_events()
    publish(shared, stream, events[: EVENTS // 2])
    expected = Counter(event["category"] for event in events)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream))

    millrace = functools.partial(run_millrace, environment)

    def stored(key: str) -> bool:
        return f"{s3_stand_in.bucket}/{prefix}/{key}" in s3_stand_in.keys(prefix)

    checkpoint = f"checkpoints/{name}/{QUERY}"
    running = subprocess.Popen(
        [sys.executable, "-m", "millrace.cli.main", "run", str(source), "--trigger", "interval:1s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 480
        while not stored(f"{checkpoint}/commits/0"):
            assert running.poll() is None, "the app stopped by itself"
            assert time.monotonic() < deadline, "no batch committed under s3a:// in 8 minutes"
            time.sleep(0.5)
        publish(shared, stream, events[EVENTS // 2 :])
        while not stored(f"{checkpoint}/offsets/1"):  # killed once batch 1 is under way
            assert running.poll() is None, "the app stopped by itself"
            assert time.monotonic() < deadline, "no second batch under s3a:// in 8 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.wait()

    listed = millrace("history", name, "--json")
    assert listed.returncode == 0, listed.stderr
    batches = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [batch["batch"] for batch in batches][:2] == [0, 1]
    assert batches[0]["committed"]

    rolled = millrace("rollback", name, "--to-batch", "0")
    assert rolled.returncode == 0, rolled.stderr
    assert f"{QUERY}: back to batch 0" in rolled.stdout
    assert f"backup: s3a://{s3_stand_in.bucket}/{prefix}/backups/{name}/" in rolled.stdout
    assert not stored(f"{checkpoint}/offsets/1")

    restarted = millrace("run", str(source), "--available-now")
    assert restarted.returncode == 0, restarted.stderr
    printed = read_back_answer(environment, name, stream, expected)

    assert any("/_delta_log/" in key for key in s3_stand_in.keys(f"{prefix}/tables/{name}"))
    assert not (shared.root / "checkpoints" / name).exists()  # nothing on the local disk
    assert not (shared.root / "tables").exists()
    outputs = "".join(done.stdout + done.stderr for done in (listed, rolled, restarted, printed))
    assert s3_stand_in.secret_key not in outputs


PROCESSOR = """
from millrace import Input, Processor, ValueState


class PerCategory(Processor):
    name = "{name}"
    inputs = [Input("{stream}", key="category", time="event_time", lateness="1s")]
    seen = ValueState(int)

    def on_record(self, key, record, ctx):
        if key == "{closing}":
            return
        if not self.seen.exists():
            ctx.set_timer("emit", event_time_ms={emit_ms})
        self.seen.set(self.seen.get(0) + 1)

    def on_timer(self, key, timer, ctx):
        ctx.produce("{output}", {{"category": key, "n": self.seen.get()}})
"""
END_MS = 1_767_229_200_000  # 2026-01-01T01:00:00Z: after every event of `_events`
CLOSING = "zz_closing"


@pytest.mark.timeout(1200)  # a Spark run whose every file goes through moto
def test_a_processor_keeps_its_state_and_timers_under_s3a_and_gives_the_exact_answer(
    workspace: Workspace, s3_stand_in: S3StandIn, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    name, prefix = f"s3_processor_{run}", f"processor-{run}"
    stream, output = f"test.s3-in.{run}", f"test.s3-out.{run}"
    environment = shared_workspace(workspace, s3_stand_in.environment(prefix), tmp_path)
    shared = Workspace.locate(environment)
    create_stream(shared.settings, stream, buckets=2)
    create_stream(shared.settings, output)
    events = app_events()
    publish(shared, stream, events)
    with Publisher(stream, settings=shared.settings) as publisher:
        for bucket in range(2):  # each bucket's watermark passes the timers
            closing = {"event_time": "2026-01-01T02:00:00Z", "category": CLOSING}
            publisher.send(closing, bucket=bucket)
    module = tmp_path / "per_category.py"
    module.write_text(
        PROCESSOR.format(name=name, stream=stream, output=output, emit_ms=END_MS, closing=CLOSING)
    )

    ran = run_millrace(environment, "run", f"{module}:PerCategory", "--available-now")
    assert ran.returncode == 0, ran.stderr
    listed = run_millrace(environment, "history", name, "--json")
    assert listed.returncode == 0, listed.stderr

    productions = [
        record.value
        for record in tail(output, TailStart(from_beginning=True), settings=shared.settings)
        if record.value
    ]
    counted = Counter({value["category"]: value["n"] for value in productions})
    assert counted == Counter(event["category"] for event in events)
    assert len(productions) == len(counted)  # each category's count produced once
    checkpoint = f"{s3_stand_in.bucket}/{prefix}/checkpoints/{name}/processor"
    stored = s3_stand_in.keys(prefix)
    assert f"{checkpoint}/commits/0" in stored
    assert f"{checkpoint}/pending_timers.json" in stored  # millrace's own file beside Spark's
    batches = [json.loads(line)["batch"] for line in listed.stdout.splitlines()]
    assert batches and batches == list(range(len(batches)))  # read back from s3a://
    assert not (shared.root / "checkpoints" / name).exists()  # nothing on the local disk
    assert s3_stand_in.secret_key not in ran.stdout + ran.stderr + listed.stdout


BACKFILL_APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 minute';
CREATE TABLE per_minute AS
SELECT category, COUNT(*) AS n FROM events [1 minute] GROUP BY category;
"""


@pytest.mark.timeout(1200)  # two Spark runs whose every file goes through moto
def test_a_stream_archived_under_s3a_backfills_an_app_with_the_exact_answer(
    workspace: Workspace, s3_stand_in: S3StandIn, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    name, stream, prefix = f"s3_backfill_{run}", f"test.s3-archive.{run}", f"warehouse-{run}"
    environment = shared_workspace(workspace, s3_stand_in.environment(prefix), tmp_path)
    shared = Workspace.locate(environment)
    created = run_millrace(environment, "stream", "create", stream, "--buckets", "2", "--archive")
    assert created.returncode == 0, created.stderr
    events = app_events()
    publish(shared, stream, events)
    source = tmp_path / "app.sql"
    source.write_text(BACKFILL_APP.format(name=name, stream=stream))

    archived = run_millrace(
        environment, "archive", stream, "--available-now", "--time", "event_time"
    )
    assert archived.returncode == 0, archived.stderr
    assert f"stream {stream}: {EVENTS} records in " in archived.stdout
    backfilled = run_millrace(
        environment, "backfill", str(source), "--from", "2026-01-01T00:00:00Z",
        "--to", "2026-01-02T00:00:00Z", "--into", "per_minute",
    )  # fmt: skip
    assert backfilled.returncode == 0, backfilled.stderr
    printed = run_millrace(environment, "query", f"{name}.per_minute")
    assert printed.returncode == 0, printed.stderr

    # Every event counted once, in its minute: the answer computed from the events.
    rows = [json.loads(line) for line in printed.stdout.splitlines()]
    counted = {(row["window_start"][:16], row["category"]): row["n"] for row in rows}
    assert counted == Counter((event["event_time"][:16], event["category"]) for event in events)
    assert any("/_delta_log/" in key for key in s3_stand_in.keys(f"{prefix}/warehouse"))
    assert not (shared.root / "warehouse").exists()  # nothing on the local disk
    assert not (shared.root / "tables").exists()
    outputs = "".join(done.stdout + done.stderr for done in (archived, backfilled, printed))
    assert s3_stand_in.secret_key not in outputs


def test_at_most_once_marks_under_s3a_skip_a_batch_started_before_and_keep_the_newest(
    s3_stand_in: S3StandIn,
) -> None:
    prefix = f"marks-{uuid.uuid4().hex[:8]}"
    settings = load_settings(None, s3_stand_in.environment(prefix))
    marks = storage_root(Path("/unused"), settings) / "checkpoints" / "app" / "q" / "at_most_once"
    written: list[int] = []
    once = AtMostOnce(marks)
    for batch_id in range(25):
        assert once.write(batch_id, lambda batch_id=batch_id: written.append(batch_id))

    restarted = AtMostOnce(marks)  # a restart re-runs the last batch, marked as started
    assert not restarted.write(24, lambda: written.append(24))
    assert written == list(range(25)) and restarted.skipped == [24]
    kept = [mark.name for mark in listing(marks)]
    assert kept[-1] == f"{24:020d}" and len(kept) < 25  # old marks are dropped
