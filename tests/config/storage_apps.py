"""What the tests of a storage root share: a SQL app, the events it counts, a workspace whose
storage root is elsewhere, and millrace commands run in it as a user runs them.

The app counts events per category; `EVENTS` events a second apart in 7 categories give an
answer computed in plain Python to compare with what millrace reads from the root.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fastapi.testclient import TestClient

from millrace.api.app import create_app
from millrace.bus.publisher import Publisher
from millrace.config.workspace import Workspace, init_workspace
from millrace.ops.checkpoints import app_checkpoints

APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS n FROM events GROUP BY category;
"""
EVENTS = 3_000
QUERY = "table.per_category"


def app_events() -> list[dict[str, str]]:
    """EVENTS events a second apart from 2026-01-01T00:00:00Z, in 7 categories."""
    return [
        {"event_time": f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z", "category": f"c{n % 7}"}
        for n in range(EVENTS)
    ]


def publish(workspace: Workspace, stream: str, events: list[dict[str, str]]) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for event in events:
            publisher.send(event)


def shared_workspace(
    workspace: Workspace, storage: dict[str, str], tmp_path: Path
) -> dict[str, str]:
    """The environment of a new workspace on the test's bus, its storage root set by the
    variables `storage`."""
    environment = {
        **os.environ,
        **storage,
        "MILLRACE_HOME": str(tmp_path / "workspace"),
        "MILLRACE_KAFKA": workspace.settings.bootstrap_servers,
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "1",  # fewer state files to store per batch
    }
    init_workspace(Workspace.locate(environment))
    return environment


def run_millrace(environment: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    """A millrace command in a process of its own, as a user runs it in that environment."""
    return subprocess.run(
        [sys.executable, "-m", "millrace.cli.main", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
        check=False,
    )


def read_back_answer(
    environment: dict[str, str], name: str, stream: str, expected: Counter
) -> subprocess.CompletedProcess[str]:
    """Check that `millrace query`, the HTTP results and the monitor's view of app `name` read
    the `expected` counts and every event's offset back from the storage root; the query."""
    printed = run_millrace(environment, "query", f"{name}.per_category")
    assert printed.returncode == 0, printed.stderr
    rows = [json.loads(line) for line in printed.stdout.splitlines()]
    assert Counter({row["category"]: row["n"] for row in rows}) == expected

    shared = Workspace.locate(environment)
    with TestClient(create_app(shared)) as client:
        served = client.get(f"/apps/{name}/tables/per_category")
        monitored = client.get(f"/apps/{name}")
    assert served.status_code == 200, served.text
    assert Counter({row["category"]: row["n"] for row in served.json()}) == expected

    # The monitor (`status`, `top`, `/apps`) reads the app's progress from its checkpoint.
    [read_back] = app_checkpoints(shared, name)
    assert read_back.query == QUERY and read_back.committed_ms is not None
    assert sum(read_back.offsets[stream].values()) == EVENTS
    assert monitored.status_code == 200, monitored.text
    assert monitored.json()["lag_records"] == 0
    assert monitored.json()["last_batch_id"] == read_back.batch_id
    return printed
