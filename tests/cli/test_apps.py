import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from subprocess import CompletedProcess

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace

EXAMPLE = Path(__file__).parents[2] / "examples" / "top_events.sql"
ZEITGEIST = Path(__file__).parents[2] / "examples" / "zeitgeist.py"


def test_an_app_is_checked_run_and_its_results_queried_from_the_command_line(
    workspace: Workspace, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    for stream in ("events_stream", "superbowl_posts"):
        create_stream(workspace.settings, stream, exist_ok=True)
    events = [
        {"event_time": "2026-01-01T00:00:10Z", "event": "a", "category": "movies", "score": 1},
        {"event_time": "2026-01-01T00:00:20Z", "event": "b", "category": "movies", "score": 2},
        {"event_time": "2026-01-01T00:01:00Z", "event": "c #superbowl", "category": "sports"},
        # Far enough ahead for the watermark to close the first window.
        {"event_time": "2026-01-01T01:00:00Z", "event": "d", "category": "news", "score": 0},
    ]
    millrace("publish", "events_stream", "-", stdin="\n".join(json.dumps(e) for e in events))

    checked = millrace("check", str(EXAMPLE))
    assert checked.returncode == 0, checked.stderr
    assert "== table top_events_5min (two stages: partial aggregates per 300000 ms pane" in (
        checked.stdout
    )
    assert "app 'top_events' is valid" in checked.stdout
    # Spark's logical plans; a streaming query's physical plan, made only when it starts, is
    # left out rather than shown as Spark's AnalysisException.
    assert "== Analyzed Logical Plan ==" in checked.stdout
    assert "Exception" not in checked.stdout and "Physical Plan" not in checked.stdout

    ran = millrace("run", str(EXAMPLE), "--available-now")
    assert ran.returncode == 0, ran.stderr
    # Each query's micro-batches are shown, and what each query did with the records it read.
    lines = ran.stdout.splitlines()
    assert "top_events.table.top_events_5min: batch 0, 4 records read" in ran.stdout
    [summary] = [line for line in lines if " micro-batches read " in line and "insert" in line]
    assert summary.startswith("top_events.insert.superbowl_posts: "), ran.stdout
    assert summary.endswith(
        " read 4 records: 1 written, 0 dead-lettered, 0 late, 0 duplicates dropped"
    ), ran.stdout
    assert "input events_score: 0 bad records routed to events_stream.dlq" in lines

    queried = millrace("query", "top_events.top_events_5min", "--where", "category=movies")
    assert queried.returncode == 0, queried.stderr
    [row] = [json.loads(line) for line in queried.stdout.splitlines()]
    assert (row["category"], row["n"], row["total_score"]) == ("movies", 2, 3.0)
    assert row["window_start"] == "2026-01-01T00:00:00.000Z"

    unknown = millrace("query", "top_events.top_events_5min", "--where", "colour=red")
    assert unknown.returncode == 1
    assert "has no column 'colour'" in unknown.stderr


def test_query_answers_without_java_filtering_and_keeping_the_last_windows(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    utc = pa.timestamp("us", tz="UTC")
    for minute, counts in enumerate(({"movies": 2, "news": 1}, {"movies": 5}, {"news": 4})):
        start = datetime(2026, 1, 1, 0, minute * 5, tzinfo=UTC)
        window = {
            "window_start": pa.array([start] * len(counts), type=utc),
            "category": list(counts),
            "n": list(counts.values()),
        }
        table = fresh_workspace.tables_dir / "top_events" / "top_events_5min"
        write_deltalake(table, pa.table(window), mode="append")
    (tmp_path / "empty").mkdir()

    def query(*arguments: str) -> subprocess.CompletedProcess[str]:
        # No Java to find, nor a shell to start Spark's launcher with: a query that started
        # a SparkSession would fail.
        return subprocess.run(
            [sys.executable, "-m", "millrace.cli.main", "query", *arguments],
            capture_output=True,
            text=True,
            check=False,
            env={
                **os.environ,
                "MILLRACE_HOME": str(fresh_workspace.root),
                "JAVA_HOME": str(tmp_path / "empty"),
                "PATH": str(tmp_path / "empty"),
            },
        )

    queried = query("top_events.top_events_5min", "--where", "category=movies", "--last", "1")
    assert queried.returncode == 0, queried.stderr
    assert [json.loads(line) for line in queried.stdout.splitlines()] == [
        {"window_start": "2026-01-01T00:05:00.000Z", "category": "movies", "n": 5}
    ]
    by_time = query("top_events.top_events_5min", "--where", "window_start=2026-01-01 00:00:00")
    assert [json.loads(line)["n"] for line in by_time.stdout.splitlines()] == [2, 1]
    missing = query("top_events.nothing")
    assert missing.returncode == 1
    assert "no result table top_events.nothing" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_check_reports_an_input_stream_that_does_not_exist(
    workspace: Workspace, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION lonely;\n"
        "CREATE INPUT TABLE t (x) FROM STREAM('no.such.stream') TIME ts;\n"
        "INSERT INTO STREAM('no.such.stream') SELECT x FROM t;\n"
    )
    checked = millrace("check", str(app))
    assert checked.returncode == 1
    assert f"{app}:3:1: output stream 'no.such.stream' does not exist" in checked.stderr


def test_run_batch_takes_a_time_range_and_refuses_flags_that_do_not_go_with_it(
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    app = str(EXAMPLE)
    refusals = {
        ("--batch",): "--batch needs --from and --to",
        ("--batch", "--from", "2026-01-01T00:00:00Z"): "--batch needs --from and --to",
        ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"): (
            "--from and --to go with --batch"
        ),
        ("--batch", "--available-now", "--from", "0", "--to", "1"): (
            "use --batch or --available-now, not both"
        ),
        ("--batch", "--from", "yesterday", "--to", "2026-01-02T00:00:00Z"): (
            "Invalid value for --from: 'yesterday' is neither an ISO-8601 time"
        ),
        ("--batch", "--from", "2026-01-02T00:00:00Z", "--to", "1767225600000"): (
            "--to (1767225600000) must come after --from (2026-01-02T00:00:00Z)"
        ),
    }
    for flags, complaint in refusals.items():
        refused = millrace("run", app, *flags)
        assert refused.returncode == 2, flags
        assert complaint in refused.stderr, refused.stderr
        assert "Usage: " in refused.stderr


def test_run_batch_writes_the_results_of_a_range_and_says_what_it_wrote(
    workspace: Workspace,
    stream_name: str,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    create_stream(workspace.settings, stream_name)
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION cli_batch;\n"
        "CREATE INPUT TABLE events (event_time, category)\n"
        f"  FROM STREAM('{stream_name}') TIME event_time LATENESS '1 minute';\n"
        "CREATE TABLE per_minute AS\n"
        "SELECT category, COUNT(*) AS n FROM events [1 minute] GROUP BY category;\n"
    )
    events = [
        {"event_time": "2026-01-01T00:00:10Z", "category": "movies"},
        {"event_time": "2026-01-01T00:00:20Z", "category": "movies"},
        {"event_time": "2026-01-01T00:01:30Z", "category": "movies"},  # after the range
    ]
    millrace("publish", stream_name, "-", stdin="\n".join(json.dumps(e) for e in events))

    ran = millrace(
        "run", str(app), "--batch", "--from", "2026-01-01T00:00:00Z", "--to", "1767225660000"
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "app 'cli_batch' ran over 2026-01-01T00:00:00Z to 2026-01-01T00:01:00Z",
        "table per_minute: 1 row merged",
        f"input events: 0 bad records routed to {stream_name}.dlq",
    ]


def test_a_processor_runs_from_the_command_line_over_live_streams(
    workspace: Workspace,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    for stream in ("queries", "query_counts", "query_anomalies"):
        create_stream(workspace.settings, stream, exist_ok=True)
    start_ms = 1_767_225_600_000
    events = [
        {"query": query, "time": start_ms + second * 1000 + offset * 37}
        for second in range(12)
        for query, per_second in (("cats", 3), ("dogs", 1))
        for offset in range(per_second + second % 2)
    ]
    # An hour later: the watermark it sets closes every second above.
    events.append({"query": "closing", "time": start_ms + 3_600_000})
    millrace("publish", "queries", "-", stdin="\n".join(json.dumps(e) for e in events))

    # `check` asks the app for its plans, whatever its kind.
    checked = millrace("check", f"{ZEITGEIST}:Zeitgeist")
    assert checked.returncode == 0, checked.stderr
    assert "== processor zeitgeist ==" in checked.stdout
    assert "== Analyzed Logical Plan ==" in checked.stdout
    assert "millrace.outputs.zeitgeist" in checked.stdout  # the operator's observed outputs
    assert "app 'zeitgeist' is valid" in checked.stdout

    ran = millrace_subprocess("run", f"{ZEITGEIST}:Zeitgeist", "--available-now")

    assert ran.returncode == 0, ran.stderr
    assert "processor 'zeitgeist' running" in ran.stdout
    # PySpark's worker prints at the query's start stay off the terminal.
    assert "TransformWithStateInPandas" not in ran.stdout + ran.stderr
    expected: dict[tuple[str, int], int] = {}
    for event in events[:-1]:
        second = event["time"] // 1000 * 1000
        expected[(event["query"], second)] = expected.get((event["query"], second), 0) + 1
    counts = {
        (record.value["query"], record.value["second"]): record.value["count"]
        for record in tail(
            "query_counts", TailStart(from_beginning=True), settings=workspace.settings
        )
    }
    assert {key: count for key, count in counts.items() if count} == expected

    # The same processor in batch over the same records, closing record left out of the range,
    # produces the same values again.
    streamed = _values("query_counts", workspace)
    anomalies = _values("query_anomalies", workspace)
    batch = millrace(
        "run",
        f"{ZEITGEIST}:Zeitgeist",
        "--batch",
        "--from",
        str(start_ms),
        "--to",
        str(events[-1]["time"]),
    )
    assert batch.returncode == 0, batch.stderr
    assert f"{len(streamed) + len(anomalies)} productions, 0 dead letters" in batch.stdout
    assert sorted(_values("query_counts", workspace)) == sorted(streamed * 2)
    assert sorted(_values("query_anomalies", workspace)) == sorted(anomalies * 2)


def _values(stream: str, workspace: Workspace) -> list[str]:
    return [
        json.dumps(record.value, sort_keys=True)
        for record in tail(stream, TailStart(from_beginning=True), settings=workspace.settings)
    ]


def test_run_names_what_is_wrong_with_a_processor_target(
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    missing = millrace("run", f"{ZEITGEIST}:Nope")
    assert missing.returncode == 1
    assert f"{ZEITGEIST} has no 'Nope'" in missing.stderr
    batch = millrace("run", f"{ZEITGEIST}:Zeitgeist", "--batch")
    assert batch.returncode == 2
    assert "--batch needs --from and --to" in batch.stderr


def test_run_and_deploy_name_a_processor_files_syntax_error_without_a_traceback(
    fresh_workspace: Workspace, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    source = tmp_path / "counts.py"
    source.write_text("from millrace import Processor\nclass Counts(Processor:\n    pass\n")
    home = {"MILLRACE_HOME": str(fresh_workspace.root)}
    for verb in ("run", "deploy"):
        started = millrace(verb, f"{source}:Counts", environment=home)
        assert started.returncode == 1, started.stderr
        assert started.stderr.startswith(
            f"error[processor]: {source}:2:23: SyntaxError: invalid syntax"
        ), started.stderr
        assert "Traceback" not in started.stderr


def test_sigterm_to_a_foreground_runs_process_group_stops_it_as_ctrl_c_does(
    workspace: Workspace, tmp_path: Path
) -> None:
    # What a service manager or `kill -- -PGID` does: every process of the group gets SIGTERM,
    # Spark's JVM too; the run must stop its queries gracefully and end with status 0.
    name = f"terminated_{uuid.uuid4().hex[:8]}"
    stream = f"test.{name}"
    create_stream(workspace.settings, stream)
    app = tmp_path / "app.sql"
    app.write_text(
        f"CREATE APPLICATION {name};\n"
        f"CREATE INPUT TABLE events (event_time, category) FROM STREAM('{stream}') "
        "TIME event_time;\n"
        "CREATE TABLE per_category WITH (mode = 'updates') AS SELECT category, COUNT(*) AS n "
        "FROM events GROUP BY category;\n"
    )
    output = tmp_path / "run.out"
    with output.open("w") as sink:
        running = subprocess.Popen(
            [sys.executable, "-m", "millrace.cli.main", "run", str(app)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while f"app '{name}' running" not in output.read_text():
            assert running.poll() is None, output.read_text()
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.5)
        os.killpg(running.pid, signal.SIGTERM)
        code = running.wait(timeout=120)
    finally:
        if running.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
    said = output.read_text()
    assert code == 0, said
    assert "stopping once the running micro-batches are done..." in said
    assert said.rstrip().endswith("stopped"), said
    assert "Traceback" not in said and "stopped SparkContext" not in said


def test_check_run_and_deploy_refuse_a_distinct_count_at_its_place_before_spark(
    fresh_workspace: Workspace, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION distinct_users;\n"
        "CREATE INPUT TABLE events (event_time, user, category) FROM STREAM('events') "
        "TIME event_time;\n"
        "CREATE TABLE users WITH (mode = 'updates') AS\n"
        "SELECT category,\n"
        "       COUNT(DISTINCT user) AS users\n"
        "FROM events GROUP BY category;\n"
    )
    home = {"MILLRACE_HOME": str(fresh_workspace.root)}
    for command in (["check", str(app)], ["run", str(app)], ["deploy", str(app)]):
        refused = millrace(*command, environment=home)
        assert refused.returncode == 1, command
        assert refused.stderr.startswith(
            f"error[sql]: {app}:5:8: COUNT(DISTINCT user) cannot run on a stream"
        ), refused.stderr
        assert "APPROX_COUNT_DISTINCT(user)" in refused.stderr
        assert "running" not in refused.stdout


@pytest.fixture
def small_disk() -> Iterator[Callable[[Path], None]]:
    """Mounts a 16 KB disk of its own (a tmpfs) on a folder, soon full; unmounted after."""
    mounted: list[Path] = []

    def mount(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        command = ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small disk here: {done.stderr.strip()}")
        mounted.append(folder)

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def full_checkpoint_disk(workspace: Workspace, small_disk: Callable[[Path], None]) -> str:
    """An app name whose checkpoint folder is a small disk of its own."""
    app = f"full_{uuid.uuid4().hex[:8]}"
    small_disk(workspace.checkpoints_dir / app)
    return app


def test_a_run_that_fills_the_disk_says_which_folder_and_what_to_do(
    workspace: Workspace,
    tmp_path: Path,
    stream_name: str,
    full_checkpoint_disk: str,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    create_stream(workspace.settings, stream_name, exist_ok=True)
    events = [{"ts": "2026-01-01T00:00:10Z", "x": n} for n in range(100)]
    millrace("publish", stream_name, "-", stdin="\n".join(json.dumps(e) for e in events))
    app = tmp_path / "app.sql"
    app.write_text(
        f"CREATE APPLICATION {full_checkpoint_disk};\n"
        f"CREATE INPUT TABLE t (ts TIMESTAMP, x INT) FROM STREAM('{stream_name}') TIME ts;\n"
        f"INSERT INTO STREAM('{stream_name}.copy') SELECT x FROM t;\n"
    )
    create_stream(workspace.settings, f"{stream_name}.copy", exist_ok=True)

    ran = millrace_subprocess("run", str(app), "--available-now")

    assert ran.returncode == 1
    folder = workspace.checkpoints_dir / full_checkpoint_disk
    assert f"error[disk-full]: app {full_checkpoint_disk!r} stopped: the disk holding its " in (
        ran.stderr
    )
    assert f"checkpoint folder {folder} is full" in ran.stderr
    assert "hint: free space on that disk" in ran.stderr
    assert "Traceback" not in ran.stderr and "Logical Plan" not in ran.stderr
    # Spark's own report of it still reaches the terminal.
    assert "ERROR MicroBatchExecution" in ran.stderr


def test_a_full_disk_under_the_workspace_is_named_before_spark_starts(
    fresh_workspace: Workspace,
    tmp_path: Path,
    small_disk: Callable[[Path], None],
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    apps = fresh_workspace.root / "apps"
    small_disk(apps)
    with (apps / "filler").open("wb") as filler, contextlib.suppress(OSError):
        filler.write(bytes(1 << 20))
    app = tmp_path / "app.sql"
    app.write_text(
        "CREATE APPLICATION cramped;\n"
        "CREATE INPUT TABLE t (ts TIMESTAMP, x INT) FROM STREAM('s') TIME ts;\n"
        "INSERT INTO STREAM('s.copy') SELECT x FROM t;\n"
    )

    ran = millrace("run", str(app), environment={"MILLRACE_HOME": str(fresh_workspace.root)})

    assert ran.returncode == 1
    assert f"error[disk-full]: the disk holding {apps} is full (0 bytes free)" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_a_processor_run_that_fills_the_disk_says_which_folder(
    workspace: Workspace,
    tmp_path: Path,
    stream_name: str,
    full_checkpoint_disk: str,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    create_stream(workspace.settings, stream_name, exist_ok=True)
    events = [{"key": f"k{n % 5}", "time": 1_767_225_600_000 + n} for n in range(100)]
    millrace("publish", stream_name, "-", stdin="\n".join(json.dumps(e) for e in events))
    source = tmp_path / "counts.py"
    source.write_text(
        "from millrace import Input, Processor, ValueState\n"
        "class Counts(Processor):\n"
        f"    name = {full_checkpoint_disk!r}\n"
        f"    inputs = [Input({stream_name!r}, key='key', time='time')]\n"
        "    seen = ValueState(int)\n"
        "    def on_record(self, key, record, ctx):\n"
        "        self.seen.set(self.seen.get(0) + 1)\n"
    )

    ran = millrace_subprocess("run", f"{source}:Counts", "--available-now")

    assert ran.returncode == 1
    folder = workspace.checkpoints_dir / full_checkpoint_disk
    assert f"error[disk-full]: app {full_checkpoint_disk!r} stopped: the disk holding its " in (
        ran.stderr
    )
    assert f"checkpoint folder {folder} is full" in ran.stderr
    assert "Traceback" not in ran.stderr and "Logical Plan" not in ran.stderr
