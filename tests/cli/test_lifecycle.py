"""A SQL app and a processor deployed, watched, rolled back, restarted, upgraded and stopped
from the command line.

Each runs detached, as `millrace deploy` starts it for a user: its own process and Spark
application. The SQL app's result table is merged by key, so batches recomputed after a
rollback rewrite the same rows, and the records its second query copies to a stream carry
the ids of the first ones; both are compared with what plain Python computes.
"""

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pyarrow.parquet as pq
import pytest

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.ops import checkpoints, registry
from millrace.records import format_time_ms
from tests.apps.processors.killing import read, unique_values
from tests.cli.deployed import app_gauges, wait_for
from tests.monitor.chain import WATERMARK_MS, publish_chain

APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS n FROM events {where} GROUP BY category;
INSERT INTO STREAM('{copies}') SELECT category FROM events {where};
"""
TABLE_QUERY = "table.per_category"


def _publish(workspace: Workspace, stream: str, categories: list[str], first: int) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for number, category in enumerate(categories, start=first):
            publisher.send(
                {
                    "event_time": f"2026-01-01T00:{number // 60:02d}:{number % 60:02d}Z",
                    "category": category,
                }
            )


def _table(workspace: Workspace, app: str) -> dict[str, int]:
    """The rows of the app's Delta table, read from its log and Parquet files without Spark.

    A reading session of its own would be a third Spark application on a busy machine; the
    log's `add` and `remove` actions, replayed in order, name the files that hold the rows.
    """
    path = workspace.tables_dir / app / "per_category"
    files: set[str] = set()
    for commit in sorted((path / "_delta_log").glob("[0-9]*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                files.add(action["add"]["path"])
            elif "remove" in action:
                files.discard(action["remove"]["path"])
    rows = [row for name in sorted(files) for row in pq.read_table(path / name).to_pylist()]
    return {row["category"]: row["n"] for row in rows}


def _copied(workspace: Workspace, stream: str) -> Counter[str]:
    """The categories the app copied to `stream`, each record once by its id."""
    return Counter(value["category"] for value in unique_values(read(workspace, stream)))


# Four starts of a Spark application and their first micro-batches: on a machine shared with
# other Spark work that takes longer than the suite's default limit.
@pytest.mark.timeout(1800)
def test_deploy_ps_logs_history_rollback_restart_and_stop_a_sql_app(
    workspace: Workspace,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    run = uuid.uuid4().hex[:8]
    name, stream = f"lifecycle_{run}", f"test.lifecycle.{run}"
    copies = f"test.lifecycle-copies.{run}"
    create_stream(workspace.settings, stream, buckets=2)
    create_stream(workspace.settings, copies)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream, copies=copies, where=""))
    first = ["a", "b", "a", "c", "a"]
    _publish(workspace, stream, first, 0)

    # A driver of its own, as the `deploy.isolated` setting asks (tests/ops/test_host.py
    # drives apps in the host, where `deploy` runs them by default).
    deployed = millrace_subprocess(
        "deploy",
        str(source),
        "--trigger",
        "interval:1s",
        environment={"MILLRACE_DEPLOY_ISOLATED": f"other_app, {name}"},
    )
    assert deployed.returncode == 0, deployed.stderr
    assert f"app '{name}' deployed: pid " in deployed.stdout
    try:
        wait_for(
            "the first results",
            lambda: _table(workspace, name) == Counter(first),
            name,
            workspace,
        )
        wait_for(
            "the first copies",
            lambda: _copied(workspace, copies) == Counter(first),
            name,
            workspace,
        )
        record = registry.load(workspace, name)
        assert record.status == "running" and record.source == str(source)
        assert record.source_hash == registry.source_hash(str(source))
        assert record.trigger == "interval:1s"

        listed = millrace("ps", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = [
            json.loads(line)
            for line in listed.stdout.splitlines()
            if json.loads(line)["app"] == name
        ]
        assert (row["status"], row["pid"], row["trigger"]) == ("running", record.pid, "interval:1s")
        assert row["last_batch"][TABLE_QUERY] >= 0
        assert set(row) >= {"input_rate", "processing_lag", "watermark_lag", "uptime"}
        shown = millrace("ps")
        assert name in shown.stdout and "running" in shown.stdout
        lags = {"millrace_app_lag_records", "millrace_app_watermark_lag_seconds"}
        wait_for(
            "its lags at /metrics",
            lambda: lags <= set(app_gauges(workspace, name)),
            name,
            workspace,
        )
        assert all(app_gauges(workspace, name)[gauge] >= 0 for gauge in lags)

        running = f"app '{name}' running: 2 queries"
        logged = millrace("logs", name)
        assert running in logged.stdout, logged.stdout

        # The batch that read the first records: the app is rolled back to it later, by the
        # time it was committed. Spark writes a batch's commit after its results, so the
        # results can be seen an instant before the batch counts as committed.
        def committed() -> list[tuple[int, int]]:
            return [
                (batch.batch_id, batch.committed_ms)
                for batch in checkpoints.history(workspace, name)
                if batch.query == TABLE_QUERY and batch.committed_ms is not None
            ]

        wait_for("the first batch's commit", lambda: bool(committed()), name, workspace)
        with_first, with_first_committed_ms = max(committed())
        # `logs -f` prints what the app writes from now on: the batch of the second records.
        followed = tmp_path / "followed.log"
        with followed.open("w") as output:
            follower = subprocess.Popen(
                [sys.executable, "-m", "millrace.cli.main", "logs", name, "-f", "-n", "0"],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        try:
            second = ["b", "d", "b"]
            _publish(workspace, stream, second, len(first))
            both = Counter(first + second)
            wait_for("the second results", lambda: _table(workspace, name) == both, name, workspace)
            wait_for(
                "the second copies", lambda: _copied(workspace, copies) == both, name, workspace
            )
            wait_for(
                "a batch printed by logs -f",
                lambda: f"{name}.{TABLE_QUERY}: batch " in followed.read_text(),
                name,
                workspace,
            )
        finally:
            follower.terminate()
            follower.wait(timeout=30)

        history = millrace("history", name, "--json")
        assert history.returncode == 0, history.stderr
        batches = [
            row
            for row in map(json.loads, history.stdout.splitlines())
            if row["query"] == TABLE_QUERY
        ]
        # Each batch's end offsets, a source per bucket: the last ones have read all eight.
        offsets_read = sum(
            offset
            for source in batches[-1]["offsets"]
            for offset in source.get(stream, {}).values()
        )
        assert offsets_read == len(first) + len(second)
        assert [batch["batch"] for batch in batches] == list(range(len(batches)))
        newest = batches[-1]["batch"]
        assert newest > with_first

        copied = len(read(workspace, copies))
        rolled = millrace_subprocess("rollback", name, "--to-time", str(with_first_committed_ms))
        assert rolled.returncode == 0, rolled.stderr
        assert f"{TABLE_QUERY}: back to batch {with_first}" in rolled.stdout, rolled.stdout
        # The copying query went back as far: to its last batch committed by then.
        assert f"insert.{copies}: back to batch " in rolled.stdout, rolled.stdout
        backup = Path(rolled.stdout.split("backup: ")[1].splitlines()[0])
        moved = sorted(
            int(path.name)
            for path in (backup / TABLE_QUERY / "offsets").iterdir()
            if path.name.isdigit()
        )
        assert moved and moved[0] == with_first + 1
        rolled_at_ms = time.time() * 1000

        def recomputed() -> bool:
            batches = {b.batch_id: b for b in checkpoints.history(workspace, name)}
            again = batches.get(with_first + 1)
            return again is not None and (again.committed_ms or 0) >= rolled_at_ms - 2000

        wait_for("the batches after the rollback", recomputed, name, workspace)
        wait_for(
            "the copies recomputed after the rollback",
            lambda: len(read(workspace, copies)) > copied,
            name,
            workspace,
        )
        time.sleep(3)  # a few more micro-batches: nothing may change
        # The same results as a run without the rollback: the second records counted once,
        # and copied again with the ids of the first copies.
        assert _table(workspace, name) == both
        assert _copied(workspace, copies) == both

        # The same code again: it goes on from its checkpoint, in a new process.
        before = registry.load(workspace, name)
        starts = Path(before.log).read_text().count(running)
        same = millrace_subprocess("restart", name)
        assert same.returncode == 0, same.stderr
        assert "(same code, from its checkpoint)" in same.stdout
        assert registry.load(workspace, name).pid != before.pid
        wait_for(
            "the restarted app",
            lambda: Path(before.log).read_text().count(running) > starts,
            name,
            workspace,
        )

        # Code that keeps other state: refused before the running app is touched.
        source.write_text(
            APP.format(name=name, stream=stream, copies=copies, where="").replace(
                "COUNT(*) AS n", "COUNT(*) AS n, MAX(event_time) AS latest"
            )
        )
        refused = millrace("restart", name)
        assert refused.returncode == 1
        assert "error[state-schema]" in refused.stderr
        assert f"query {TABLE_QUERY}: aggregates was" in refused.stderr
        assert f"millrace restart {name} --fresh" in refused.stderr
        assert registry.load(workspace, name).status == "running"

        # New code with the same state: resumes with the counts so far.
        source.write_text(
            APP.format(name=name, stream=stream, copies=copies, where="WHERE category <> 'b'")
        )
        restarted = millrace_subprocess("restart", name)
        assert restarted.returncode == 0, restarted.stderr
        assert "(new code, from its checkpoint)" in restarted.stdout
        upgraded = registry.load(workspace, name)
        assert upgraded.source_hash != record.source_hash and upgraded.pid != record.pid
        third = ["b", "a", "b"]
        _publish(workspace, stream, third, len(first) + len(second))
        # Counts kept from the state, the new filter applied to the new records only.
        expected = both + Counter(c for c in third if c != "b")
        wait_for(
            "the results of the new code",
            lambda: _table(workspace, name) == expected,
            name,
            workspace,
        )
        wait_for(
            "the copies of the new code",
            lambda: _copied(workspace, copies) == expected,
            name,
            workspace,
        )
    finally:
        stopped = millrace_subprocess("stop", name)
    assert stopped.returncode == 0, stopped.stderr
    assert f"app '{name}' stopped" in stopped.stdout
    assert registry.load(workspace, name).status == "stopped"
    log = Path(registry.load(workspace, name).log).read_text()
    # SIGTERM let the running micro-batch finish, then the queries stopped.
    assert "stopping once the running micro-batches are done..." in log
    assert log.rstrip().endswith("stopped"), log[-2000:]
    exit_record = json.loads((workspace.app_exit(name)).read_text())
    assert exit_record["code"] == 0


PROCESSOR = """
from millrace import Input, Processor, ValueState


class RunningCount(Processor):
    name = "{name}"
    # Its records are dated a millisecond apart, and the test publishes more after a restart:
    # an idle timeout longer than the test keeps the idle advance from passing them.
    inputs = [Input("{source}", key="key", time="time", idle_timeout="1h")]
    seen = ValueState(int)

    def on_record(self, key, record, ctx):
        self.seen.set(self.seen.get(0) + 1)
        ctx.produce("{output}", {{"key": key, "n": self.seen.get(), "number": record["number"],
                                  "version": {version}}})
"""
KEYS = 5


def _publish_numbers(workspace: Workspace, stream: str, numbers: range) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for number in numbers:
            # Routed by key: each key's records are in one bucket, in order, however
            # the micro-batches cut them, so a recomputed count equals the first one.
            key = f"k{number % KEYS}"
            publisher.send(
                {"key": key, "number": number, "time": 1_767_225_600_000 + number}, key=key
            )


def _all_productions(workspace: Workspace, stream: str) -> list[tuple[str, dict]]:
    records = tail(stream, TailStart(from_beginning=True), settings=workspace.settings)
    return [(record.id, record.value) for record in records]


def _productions(workspace: Workspace, stream: str) -> dict[str, dict]:
    return dict(_all_productions(workspace, stream))


@pytest.mark.timeout(1800)
def test_a_processor_is_deployed_listed_stopped_restarted_with_new_code_and_rolled_back(
    workspace: Workspace,
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    run = uuid.uuid4().hex[:8]
    name, source, output = f"counts_{run}", f"test.counts-in.{run}", f"test.counts-out.{run}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, output)
    module = tmp_path / "running_count.py"
    module.write_text(PROCESSOR.format(name=name, source=source, output=output, version=1))
    _publish_numbers(workspace, source, range(0, 200))

    deployed = millrace_subprocess("deploy", f"{module}:RunningCount", "--isolated")
    assert deployed.returncode == 0, deployed.stderr
    try:
        wait_for(
            "the first productions",
            lambda: len(_productions(workspace, output)) == 200,
            name,
            workspace,
        )
        first = registry.load(workspace, name)
        assert first.kind == "processor" and first.source == f"{module}:RunningCount"
        listed = millrace("ps", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = [row for row in map(json.loads, listed.stdout.splitlines()) if row["app"] == name]
        assert (row["status"], row["pid"]) == ("running", first.pid)
        assert f"processor '{name}' running" in millrace("logs", name).stdout
        history = millrace("history", name, "--json")
        assert history.returncode == 0, history.stderr
        assert {row["query"] for row in map(json.loads, history.stdout.splitlines())} == {
            "processor"
        }
        stopped = millrace_subprocess("stop", name)
        assert stopped.returncode == 0, stopped.stderr
        assert registry.load(workspace, name).status == "stopped"
        assert "stopping once the running micro-batch is done..." in Path(first.log).read_text()

        module.write_text(PROCESSOR.format(name=name, source=source, output=output, version=2))
        restarted = millrace_subprocess("restart", name)
        assert restarted.returncode == 0, restarted.stderr
        assert "(new code, from its checkpoint)" in restarted.stdout
        # The last batch of the first run: the app is rolled back to it below.
        before_second = max(b.batch_id for b in checkpoints.history(workspace, name))
        _publish_numbers(workspace, source, range(200, 400))
        wait_for(
            "the productions of the new code",
            lambda: len(_productions(workspace, output)) == 400,
            name,
            workspace,
        )
        produced_before_rollback = len(_all_productions(workspace, output))

        # Back to before the second run's records: the batches that read them run again,
        # from the state as the first run left it, and produce the same records again.
        rolled = millrace_subprocess("rollback", name, "--to-batch", str(before_second))
        assert rolled.returncode == 0, rolled.stderr
        assert f"processor: back to batch {before_second}" in rolled.stdout, rolled.stdout
        wait_for(
            "the productions recomputed after the rollback",
            lambda: len(_all_productions(workspace, output)) >= produced_before_rollback + 200,
            name,
            workspace,
        )
        _publish_numbers(workspace, source, range(400, 500))
        wait_for(
            "the productions after the rollback",
            lambda: len(_productions(workspace, output)) == 500,
            name,
            workspace,
        )
    finally:
        millrace_subprocess("stop", name)
    by_id: dict[str, dict] = {}
    for production_id, value in _all_productions(workspace, output):
        # A recomputed production has the id and the value it had the first time.
        assert by_id.setdefault(production_id, value) == value
    productions = list(by_id.values())
    assert sorted(p["number"] for p in productions) == list(range(500))
    assert {p["version"] for p in productions if p["number"] >= 200} == {2}
    # The state carried over the restart and was rolled back with the batches: each key's
    # count went 1, 2, ... with no record counted twice or missed.
    for key in {f"k{n}" for n in range(KEYS)}:
        counts = sorted(p["n"] for p in productions if p["key"] == key)
        assert counts == list(range(1, 500 // KEYS + 1))


def test_ps_shows_an_apps_output_watermark_and_how_far_it_trails_its_source(
    workspace: Workspace, tmp_path: Path, millrace: Callable[..., CompletedProcess[str]]
) -> None:
    chain = publish_chain(workspace.settings)
    environment = {
        "MILLRACE_HOME": str(tmp_path / "home"),
        "MILLRACE_KAFKA_PORT": str(workspace.settings.kafka_port),
    }
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "millrace.toml").write_text("")
    home = Workspace.locate(environment)
    for letter in "ac":
        registry.save(
            home,
            registry.AppRecord(
                chain.apps[letter], "sql", "/apps/x.sql", "ab12", checkpoint="-", log="-"
            ),
        )

    listed = millrace("ps", "--json", environment=environment)
    shown = millrace("ps", environment=environment)

    assert listed.returncode == 0, listed.stderr
    rows = {row["app"]: row for row in map(json.loads, listed.stdout.splitlines())}
    source, last = rows[chain.apps["a"]], rows[chain.apps["c"]]
    assert (source["output_watermark"], source["behind_source"]) == (
        format_time_ms(WATERMARK_MS["a"] - 1),
        "0.0s",
    )
    assert (last["output_watermark"], last["behind_source"]) == (
        format_time_ms(WATERMARK_MS["c"] - 1),
        "40.0s",
    )
    header, *lines = shown.stdout.splitlines()
    assert header.split()[-2:] == ["OUTPUT_WATERMARK", "BEHIND_SOURCE"]
    [line] = [line for line in lines if line.startswith(chain.apps["c"])]
    assert line.split()[-2:] == [format_time_ms(WATERMARK_MS["c"] - 1), "40.0s"]
