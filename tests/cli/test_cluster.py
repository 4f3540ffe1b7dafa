"""`--master` runs an app on a Spark standalone cluster: the master and two workers that
`millrace up --spark-workers 2` starts from PySpark's own install, on loopback, with small
memory; and the app's results stay exact when a worker is killed under it.

The first is marked `soak`: its run on the cluster takes minutes on a shared machine, and
the second, which `make test` runs, also runs an app on it.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.local_cluster import (
    ClusterStatus,
    alive_workers,
    start_cluster,
    stop_cluster,
)
from millrace.errors import ResultTableNotFoundError
from millrace.warehouse.result_tables import read_result_rows
from tests.ports import free_port

APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS n FROM events GROUP BY category;
"""
START_MS = 1_767_225_600_000


@pytest.fixture
def cluster(workspace: Workspace) -> Iterator[ClusterStatus]:
    """The workspace's local cluster: a master and two one-core, 1 GB workers."""
    own_port = replace(
        workspace, settings=replace(workspace.settings, spark_cluster_port=free_port())
    )
    try:
        yield start_cluster(own_port, workers=2)
    finally:
        stop_cluster(own_port)


def _master_apps(cluster: ClusterStatus) -> list[dict]:
    """The apps the master lists as completed."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ui_port}/json/", timeout=10) as got:
        return json.load(got)["completedapps"]


def _publish(workspace: Workspace, stream: str, categories: list[str], first: int) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for number, category in enumerate(categories, start=first):
            publisher.send({"event_time": START_MS + number, "category": category})


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_an_app_runs_on_a_standalone_cluster_with_master(
    workspace: Workspace,
    spark: SparkSession,
    cluster: ClusterStatus,
    tmp_path: Path,
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    run = uuid.uuid4().hex[:8]
    name, stream = f"cluster_{run}", f"test.cluster.{run}"
    create_stream(workspace.settings, stream, buckets=2)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream))
    categories = ["a", "b", "a", "c", "a", "b"]
    _publish(workspace, stream, categories, 0)

    ran = millrace_subprocess("run", str(source), "--available-now", "--master", cluster.url)
    assert ran.returncode == 0, ran.stderr + ran.stdout

    rows = read_result_rows(workspace, name, "per_category")
    assert {row["category"]: row["n"] for row in rows} == Counter(categories)
    # The app was the cluster's: the master lists it, with the executors of both workers.
    [app] = [a for a in _master_apps(cluster) if a["name"] == name]
    assert app["cores"] == 2


@pytest.mark.timeout(1800)
def test_a_worker_killed_mid_run_leaves_the_results_exact_and_the_app_catches_up(
    workspace: Workspace, cluster: ClusterStatus, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    name, stream = f"lost_worker_{run}", f"test.lost-worker.{run}"
    create_stream(workspace.settings, stream, buckets=4)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream))
    sent = [f"c{n % 7}" for n in range(2_000)]
    _publish(workspace, stream, sent, 0)
    app = subprocess.Popen(
        [sys.executable, "-m", "millrace.cli.main", "run", str(source), "--master", cluster.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert _counts_reach(workspace, name, Counter(sent), app), "the first records"
        os.kill(cluster.worker_pids[0], signal.SIGKILL)
        # Published once the worker is gone: their tasks run on the other worker only.
        more = [f"c{n % 5}" for n in range(2_000)]
        _publish(workspace, stream, more, len(sent))
        assert _counts_reach(workspace, name, Counter(sent + more), app), "after the loss"
        assert alive_workers(cluster) == 1
    finally:
        os.killpg(app.pid, signal.SIGINT)
        printed, _ = app.communicate(timeout=120)
    assert app.returncode == 0, printed


def _counts_reach(
    workspace: Workspace, app: str, expected: Counter, process: subprocess.Popen
) -> bool:
    """Whether the app's counts come to `expected` within 5 minutes; never more than it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, "the app ended"
        try:
            rows = read_result_rows(workspace, app, "per_category")
        except ResultTableNotFoundError:
            rows = []
        counts = Counter({row["category"]: row["n"] for row in rows})
        assert all(counts[key] <= expected[key] for key in counts), counts
        if counts == expected:
            return True
        time.sleep(2)
    return False
