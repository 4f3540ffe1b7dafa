"""`--master` runs an app on a Spark standalone cluster: a master and two workers, started here
from PySpark's own install, on loopback, with small memory.

Marked `soak`: starting the cluster and an app on it takes a few minutes on a shared machine.
"""

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pyspark
import pytest
from pyspark.sql import SparkSession

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from tests.ports import free_port

SPARK_HOME = Path(pyspark.__file__).parent
APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT category, COUNT(*) AS n FROM events GROUP BY category;
"""


def _master_state(ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=10) as answer:
        return json.load(answer)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A standalone master and two one-core, 1 GB workers; its URL and the master's UI port."""
    port, ui_port = free_port(), free_port()
    environment = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    url = f"spark://127.0.0.1:{port}"
    processes = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        for worker in range(2):
            processes.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(tmp_path / f"worker{worker}"),
                        url,
                    ],
                    env=environment,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 180
        while True:
            try:
                alive = [w for w in _master_state(ui_port)["workers"] if w["state"] == "ALIVE"]
            except OSError:
                alive = []
            if len(alive) == 2:
                break
            assert time.monotonic() < deadline, "the cluster's two workers did not register"
            time.sleep(1)
        yield url, ui_port
    finally:
        for process in reversed(processes):
            os.killpg(process.pid, 15)
        for process in processes:
            process.wait(timeout=60)


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_an_app_runs_on_a_standalone_cluster_with_master(
    workspace: Workspace,
    spark: SparkSession,
    cluster: tuple[str, int],
    tmp_path: Path,
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    url, ui_port = cluster
    run = uuid.uuid4().hex[:8]
    name, stream = f"cluster_{run}", f"test.cluster.{run}"
    create_stream(workspace.settings, stream, buckets=2)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream))
    categories = ["a", "b", "a", "c", "a", "b"]
    with Publisher(stream, settings=workspace.settings) as publisher:
        for number, category in enumerate(categories):
            publisher.send({"event_time": 1_767_225_600_000 + number, "category": category})

    ran = millrace_subprocess("run", str(source), "--available-now", "--master", url)
    assert ran.returncode == 0, ran.stderr + ran.stdout

    rows = spark.read.format("delta").load(str(workspace.tables_dir / name / "per_category"))
    assert {row["category"]: row["n"] for row in rows.collect()} == Counter(categories)
    # The app was the cluster's: the master lists it, with the executors of both workers.
    [app] = [a for a in _master_state(ui_port)["completedapps"] if a["name"] == name]
    assert app["cores"] == 2
