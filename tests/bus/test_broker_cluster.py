"""A local bus of three KRaft nodes (`kafka.brokers = 3`): one node killed with kill -9 while
records are published and an app reads them, and started again, loses nothing.

The app runs in a `millrace run` process of its own: the test run's SparkSession publishes
its apps' metrics to the bus of the first workspace it ran an app for, which must not be this
one, stopped at the end of the test.

Marked `soak`: an app that starts while the node is lost can still end at its start. After
12 passing runs alone, in a full CI run (where the app's start took long enough to meet the
loss) the app ended on "the bus did not answer for the offsets of stream ... in 30 s":
`bus.streams._offsets` asks once more, and that went unanswered too (a likely cause, not
proven: the process's cached admin client still knew the lost node as the leader; issue 47)."""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from millrace.bus.broker import broker_status, start_broker, stop_broker
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import admin_client, create_stream
from millrace.config.local_processes import loopback_port_is_free
from millrace.config.workspace import Workspace, init_workspace

RECORDS = 3_000
START_MS = 1_767_225_600_000


def _free_block(size: int) -> int:
    """The first of `size` consecutive loopback ports that are free now."""
    for first in range(21_000, 60_000, size):
        ports = range(first, first + size)
        if all(loopback_port_is_free(port) for port in ports):
            return first
    raise AssertionError("no block of free ports")


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    """The MILLRACE_* variables of a workspace whose bus is three nodes."""
    first = _free_block(6)
    return {
        "MILLRACE_HOME": str(tmp_path / "workspace"),
        "MILLRACE_KAFKA_BROKERS": "3",
        "MILLRACE_KAFKA_PORT": str(first),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(first + 1),
        "MILLRACE_KAFKA_HEAP": "512m",
    }


@pytest.fixture
def cluster(environment: dict[str, str]) -> Iterator[Workspace]:
    """The workspace of `environment`, its bus up; stopped at the end."""
    workspace = Workspace.locate({**os.environ, **environment})
    init_workspace(workspace)
    start_broker(workspace)
    try:
        yield workspace
    finally:
        stop_broker(workspace)


def _in_sync(workspace: Workspace, stream: str) -> list[int]:
    """The in-sync copies of each bucket of `stream`."""
    topic = admin_client(workspace.settings).list_topics(topic=stream, timeout=10).topics[stream]
    return [len(topic.partitions[bucket].isrs) for bucket in sorted(topic.partitions)]


@pytest.mark.soak
def test_a_node_lost_mid_run_loses_no_record_and_stops_no_app_and_then_rejoins(
    cluster: Workspace, environment: dict[str, str], tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.replicated.{run}", f"test.replicated-out.{run}"
    create_stream(cluster.settings, source, buckets=3)
    create_stream(cluster.settings, output, buckets=3)
    assert _in_sync(cluster, source) == [3, 3, 3]
    app_file = tmp_path / "replicated.sql"
    app_file.write_text(
        f"CREATE APPLICATION replicated_{run};\n"
        f"CREATE INPUT TABLE events (time, n INT) FROM STREAM('{source}') TIME time;\n"
        f"INSERT INTO STREAM('{output}') SELECT n FROM events WHERE n % 2 = 0;\n"
    )
    app = subprocess.Popen(
        [sys.executable, "-m", "millrace.cli.main", "run", str(app_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **environment},
        start_new_session=True,
    )
    halfway = threading.Event()

    def publish() -> None:
        with Publisher(source, settings=cluster.settings) as out:
            for number in range(RECORDS):
                out.send({"time": START_MS + number, "n": number}, record_id=f"r{number}")
                if number == RECORDS // 2:
                    out.flush()
                    halfway.set()
                    time.sleep(2)  # the node goes while records are still coming
                time.sleep(0.002)

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        assert halfway.wait(120)
        lost = broker_status(cluster).node_pids[1]
        assert lost is not None
        os.kill(lost, signal.SIGKILL)
        publisher.join(300)
        assert not publisher.is_alive()
        expected = list(range(0, RECORDS, 2))
        deadline = time.monotonic() + 300
        while sorted(_by_id(cluster, output).values()) != expected:
            assert app.poll() is None, app.communicate()[0][-1200:]
            assert time.monotonic() < deadline, "the app's output never came to all records"
            time.sleep(2)
    finally:
        publisher.join()
        os.killpg(app.pid, signal.SIGINT)
        printed, _ = app.communicate(timeout=120)
    assert app.returncode == 0, printed

    # A reader counts a record once by its id (a task run again after the loss may have
    # written copies, which carry the same id): each id once, each record there.
    published = _by_id(cluster, source)
    assert sorted(published) == sorted(f"r{n}" for n in range(RECORDS))
    assert min(_in_sync(cluster, source)) == 2

    start_broker(cluster)  # starts the node that is down
    deadline = time.monotonic() + 120
    while _in_sync(cluster, source) != [3, 3, 3]:
        assert time.monotonic() < deadline, _in_sync(cluster, source)
        time.sleep(1)


def _by_id(workspace: Workspace, stream: str) -> dict[str, int]:
    """Each record's `n` by its id; copies of a record must be the same record."""
    found: dict[str, int] = {}
    for record in tail(stream, TailStart(from_beginning=True), settings=workspace.settings):
        assert found.setdefault(record.id, int(record.value["n"])) == int(record.value["n"])
    return found
