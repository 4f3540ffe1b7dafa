"""The example apps deployed, listed (with their lags, also at `/metrics`), logged, rolled back,
restarted and stopped from the command line, their results checked against plain Python.

`examples/zeitgeist.py` runs as a subclass with streams of its own (as in
tests/runtime/test_example_processors.py), `examples/top_events.sql` with its application and
streams renamed. Each is deployed detached, as `millrace deploy` starts it for a user; a
rollback makes it recompute batches whose outputs it had written, and a reader that drops
copies by id sees the results of a run without the rollback.
"""

import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from millrace.api.app import create_app
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import ResultTableNotFoundError
from millrace.runtime import checkpoints, registry
from millrace.runtime.result_files import read_result_rows
from tests.cli.deployed import wait_for
from tests.examples import EXAMPLES
from tests.examples import zeitgeist_cases as zeitgeist
from tests.examples.live_apps import live_zeitgeist_module, publish
from tests.runtime.killing import read, unique_values


def _committed(workspace: Workspace, app: str) -> list[checkpoints.Batch]:
    return [batch for batch in checkpoints.history(workspace, app) if batch.committed_ms]


def _gauges(workspace: Workspace, app: str) -> dict[str, float]:
    """The app's gauges at `/metrics` of the HTTP service, by name."""
    response = TestClient(create_app(workspace)).get("/metrics")
    assert response.status_code == 200
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.labels == {"app": app}
    }


def _listed_and_logged(
    millrace: Callable[..., CompletedProcess[str]],
    workspace: Workspace,
    app: str,
    running_line: str,
) -> None:
    """`ps`, `logs`, `history` and `/metrics` show the running app, its lags and batches."""
    listed = millrace("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = [json.loads(line) for line in listed.stdout.splitlines() if app in line]
    assert (row["app"], row["status"]) == (app, "running")
    assert set(row) >= {"input_rate", "processing_lag", "watermark_lag", "uptime"}
    lags = {"millrace_app_lag_records", "millrace_app_watermark_lag_seconds"}
    wait_for("its lags at /metrics", lambda: lags <= set(_gauges(workspace, app)), app, workspace)
    gauges = _gauges(workspace, app)
    assert all(gauges[gauge] >= 0 for gauge in lags)
    logged = millrace("logs", app)
    assert running_line in logged.stdout, logged.stdout
    history = millrace("history", app, "--json")
    assert history.returncode == 0, history.stderr
    batches = [json.loads(line) for line in history.stdout.splitlines()]
    assert {batch["batch"] for batch in batches} >= {b.batch_id for b in _committed(workspace, app)}


def _rolled_back(
    millrace_subprocess: Callable[..., CompletedProcess[str]],
    workspace: Workspace,
    app: str,
    to_batch: int,
    query: str,
) -> None:
    """Roll `app` back to `to_batch` and wait until it has committed the next batch again."""
    rolled_at_ms = time.time() * 1000
    rolled = millrace_subprocess("rollback", app, "--to-batch", str(to_batch))
    assert rolled.returncode == 0, rolled.stderr
    assert f"{query}: back to batch {to_batch}" in rolled.stdout, rolled.stdout

    def recomputed() -> bool:
        again = [
            batch
            for batch in checkpoints.history(workspace, app)
            if batch.query == query and batch.batch_id == to_batch + 1
        ]
        return bool(again) and (again[0].committed_ms or 0) >= rolled_at_ms - 2000

    wait_for("the batches after the rollback", recomputed, app, workspace)


def _restarted(
    millrace_subprocess: Callable[..., CompletedProcess[str]],
    workspace: Workspace,
    app: str,
    running_line: str,
) -> None:
    """Restart `app` with its code as it is; wait until its new process runs."""
    before = registry.load(workspace, app)
    starts = Path(before.log).read_text().count(running_line)
    restarted = millrace_subprocess("restart", app)
    assert restarted.returncode == 0, restarted.stderr
    assert "(same code, from its checkpoint)" in restarted.stdout
    assert registry.load(workspace, app).pid != before.pid
    wait_for(
        "the restarted app",
        lambda: Path(before.log).read_text().count(running_line) > starts,
        app,
        workspace,
    )


def _stop(
    millrace_subprocess: Callable[..., CompletedProcess[str]], workspace: Workspace, app: str
) -> None:
    stopped = millrace_subprocess("stop", app)
    assert stopped.returncode == 0, stopped.stderr
    assert registry.load(workspace, app).status == "stopped"


# Three starts of a Spark application (deploy, rollback, restart) and their first batches.
@pytest.mark.timeout(1800)
def test_zeitgeist_is_deployed_listed_rolled_back_restarted_and_stopped(
    workspace: Workspace,
    tmp_path: Path,
    millrace_subprocess: Callable[..., CompletedProcess[str]],
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    rng = random.Random(8)
    seconds = 30
    counts = {
        "cats": [rng.randint(2, 5) for _ in range(seconds)],
        "dogs": [rng.choice([0, 1, 2]) for _ in range(seconds)],
    }
    records = zeitgeist.queries_per_second(counts, rng)
    arrivals = [record for batch in zeitgeist.micro_batches(records, rng) for record in batch]
    module, source, streams = live_zeitgeist_module(tmp_path, workspace)
    app = module.stem.removeprefix("live_")
    half = len(arrivals) // 2
    publish(workspace, source, arrivals[:half])

    deployed = millrace_subprocess("deploy", f"{module}:LiveZeitgeist")
    assert deployed.returncode == 0, deployed.stderr
    try:
        wait_for("a first batch", lambda: bool(_committed(workspace, app)), app, workspace)
        running = f"processor '{app}' running"
        _listed_and_logged(millrace, workspace, app, running)
        # The last batch before the rest of the records: the app is rolled back to it.
        before_rest = max(batch.batch_id for batch in _committed(workspace, app))
        publish(workspace, source, arrivals[half:])
        expected = zeitgeist.expected_counts(records)

        def counted() -> dict[tuple[str, int], int]:
            values = unique_values(read(workspace, streams["counts_stream"]))
            return {(value["query"], value["second"]): value["count"] for value in values}

        wait_for("every second counted", lambda: counted() == expected, app, workspace)
        written = len(read(workspace, streams["counts_stream"]))

        _rolled_back(millrace_subprocess, workspace, app, before_rest, "processor")
        wait_for(
            "the counts recomputed after the rollback",
            lambda: len(read(workspace, streams["counts_stream"])) > written,
            app,
            workspace,
        )
        # The recomputed counts carry the ids of the first ones: a reader sees them once.
        assert counted() == expected
        anomalies = unique_values(read(workspace, streams["anomalies_stream"]))
        assert zeitgeist.by_query_and_second(anomalies) == zeitgeist.expected_anomalies(expected)

        _restarted(millrace_subprocess, workspace, app, running)
        assert counted() == expected
    finally:
        _stop(millrace_subprocess, workspace, app)


TOP_EVENTS_CATEGORIES = ["movies", "music", "sports"]


def _top_events_source(tmp_path: Path, run: str) -> tuple[Path, str, str, str]:
    """examples/top_events.sql with its application and streams renamed for this run."""
    app, source, posts = f"top_events_{run}", f"test.events-{run}", f"test.superbowl-{run}"
    text = (
        (EXAMPLES / "top_events.sql")
        .read_text()
        .replace("CREATE APPLICATION top_events;", f"CREATE APPLICATION {app};")
        .replace("STREAM('events_stream')", f"STREAM('{source}')")
        .replace("STREAM('superbowl_posts')", f"STREAM('{posts}')")
    )
    file = tmp_path / "top_events.sql"
    file.write_text(text)
    return file, app, source, posts


def _events(first: int, count: int) -> list[dict]:
    """Events 20 s apart from 2026-01-01T00:00:00Z: three categories, some Super Bowl posts."""
    return [
        {
            "event_time": datetime.fromtimestamp(1_767_225_600 + number * 20, UTC).isoformat(),
            "event": f"e{number % 4}" + (" #superbowl" if number % 5 == 0 else ""),
            "category": TOP_EVENTS_CATEGORIES[number % 3],
            "score": float(number % 7),
        }
        for number in range(first, first + count)
    ]


def _windows(events: list[dict]) -> dict[tuple[str, str], tuple[int, float]]:
    """Plain Python: (window start, category) -> (events, total score) per 5-minute window."""
    windows: dict[tuple[str, str], tuple[int, float]] = {}
    for event in events:
        seconds = int(datetime.fromisoformat(event["event_time"]).timestamp())
        start = datetime.fromtimestamp(seconds // 300 * 300, UTC).isoformat()
        count, total = windows.get((start, event["category"]), (0, 0.0))
        windows[(start, event["category"])] = (count + 1, total + event["score"])
    return windows


@pytest.mark.timeout(1800)
def test_top_events_is_deployed_listed_rolled_back_restarted_and_stopped(
    workspace: Workspace,
    tmp_path: Path,
    millrace_subprocess: Callable[..., CompletedProcess[str]],
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    run = uuid.uuid4().hex[:8]
    file, app, source, posts = _top_events_source(tmp_path, run)
    create_stream(workspace.settings, source, buckets=1)
    create_stream(workspace.settings, posts)
    first, rest = _events(0, 30), _events(30, 30)
    # Far enough ahead for the watermark to close every window of the events.
    closing = {**_events(60, 1)[0], "event_time": "2026-01-01T02:00:00+00:00"}

    def send(events: list[dict]) -> None:
        with Publisher(source, settings=workspace.settings, time_field="event_time") as publisher:
            for event in events:
                publisher.send(event)

    send(first)
    deployed = millrace_subprocess("deploy", str(file))
    assert deployed.returncode == 0, deployed.stderr
    try:
        wait_for(
            "a first batch of both queries",
            lambda: len({batch.query for batch in _committed(workspace, app)}) == 2,
            app,
            workspace,
        )
        running = f"app '{app}' running: 2 queries"
        _listed_and_logged(millrace, workspace, app, running)
        # Both queries go back to a batch before the rest of the events, so both recompute.
        committed = _committed(workspace, app)
        before_rest = min(
            max(batch.batch_id for batch in committed if batch.query == query)
            for query in {batch.query for batch in committed}
        )
        table_query = "table.top_events_5min"
        send([*rest, closing])

        def results() -> dict[tuple[str, str], tuple[int, float]]:
            try:
                rows = read_result_rows(workspace, app, "top_events_5min")
            except ResultTableNotFoundError:
                return {}
            return {
                (row["window_start"].astimezone(UTC).isoformat(), row["category"]): (
                    row["n"],
                    row["total_score"],
                )
                for row in rows
            }

        expected = _windows(first + rest)
        wait_for("every window's results", lambda: results() == expected, app, workspace)
        posted = len(read(workspace, posts))

        _rolled_back(millrace_subprocess, workspace, app, before_rest, table_query)
        wait_for(
            "the posts recomputed after the rollback",
            lambda: len(read(workspace, posts)) > posted,
            app,
            workspace,
        )
        # The result table is merged by window and key, and the recomputed posts carry the
        # ids of the first ones: the results of a run without the rollback.
        assert results() == expected
        sports_posts = [e for e in first + rest if e["category"] == "sports" and "#" in e["event"]]
        assert Counter(v["event"] for v in unique_values(read(workspace, posts))) == Counter(
            event["event"] for event in sports_posts
        )

        _restarted(millrace_subprocess, workspace, app, running)
        assert results() == expected
    finally:
        _stop(millrace_subprocess, workspace, app)
