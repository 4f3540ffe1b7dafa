"""A local bus of three KRaft nodes (`kafka.brokers = 3`): one node killed with kill -9 while
records are published and an app reads them, and started again, loses nothing: not a record,
not a dead letter, not the app's watermark markers or idle ticks; and a stream's offsets,
asked for right after the loss, are answered and right.

The app runs in a `millrace run` process of its own: the test run's SparkSession publishes
its apps' metrics to the bus of the first workspace it ran an app for, which must not be this
one, stopped at the end of the test."""

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
from millrace.bus.internal import end_offsets, latest_markers
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import admin_client, create_stream, dead_letter_stream, describe_stream
from millrace.config.local_processes import free_loopback_ports
from millrace.config.workspace import Workspace, init_workspace
from millrace.engine.low_watermark import tick_stream
from millrace.errors import StreamNotFoundError
from tests.plain_producer import plain_producer

RECORDS = 3_000
BAD_EVERY = 150
"""Every 150th record published is not JSON: a dead letter."""
LATENESS_MS = 2_000
START_MS = 1_767_225_600_000


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    """The MILLRACE_* variables of a workspace whose bus is three nodes."""
    first = free_loopback_ports(6)
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


def test_a_streams_offsets_asked_right_after_a_node_is_lost_are_answered_and_right(
    cluster: Workspace,
) -> None:
    # An app starting as a node is lost asks for its inputs' offsets; the lost node still
    # leads a third of the buckets until the bus fences it (its session timeout, 9 s).
    stream = f"test.replicated-offsets.{uuid.uuid4().hex[:8]}"
    create_stream(cluster.settings, stream, buckets=3)
    with Publisher(stream, settings=cluster.settings) as out:
        for number in range(300):
            out.send({"time": START_MS + number, "n": number}, record_id=f"r{number}")
    before = describe_stream(cluster.settings, stream)
    assert before.record_count == 300

    lost = broker_status(cluster).node_pids[1]
    assert lost is not None
    os.kill(lost, signal.SIGKILL)
    assert describe_stream(cluster.settings, stream) == before


def test_a_node_lost_mid_run_loses_no_record_and_stops_no_app_and_then_rejoins(
    cluster: Workspace, environment: dict[str, str], tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.replicated.{run}", f"test.replicated-out.{run}"
    create_stream(cluster.settings, source, buckets=3)
    create_stream(cluster.settings, output, buckets=3)
    assert _in_sync(cluster, source) == [3, 3, 3]
    app_file = tmp_path / "replicated.sql"
    app_name = f"replicated_{run}"
    # With a lateness the app writes watermark markers to its output and, once its input is
    # quiet for the idle timeout, ticks its buckets on through its tick stream.
    app_file.write_text(
        f"CREATE APPLICATION {app_name};\n"
        f"CREATE INPUT TABLE events (time, n INT) FROM STREAM('{source}') TIME time\n"
        f"  LATENESS '{LATENESS_MS} milliseconds' IDLE TIMEOUT '3 seconds';\n"
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
        bad = plain_producer(cluster.settings)
        with Publisher(source, settings=cluster.settings) as out:
            for number in range(RECORDS):
                if number % BAD_EVERY == 0:
                    bad.produce(source, b"not json", headers=[("id", f"r{number}".encode())])
                else:
                    out.send({"time": START_MS + number, "n": number}, record_id=f"r{number}")
                if number == RECORDS // 2:
                    out.flush()
                    bad.flush()
                    halfway.set()
                    time.sleep(2)  # the node goes while records are still coming
                time.sleep(0.002)
        bad.flush()

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        assert halfway.wait(120)
        lost = broker_status(cluster).node_pids[1]
        assert lost is not None
        os.kill(lost, signal.SIGKILL)
        publisher.join(300)
        assert not publisher.is_alive()
        expected = [n for n in range(0, RECORDS, 2) if n % BAD_EVERY]
        deadline = time.monotonic() + 300
        while sorted(_by_id(cluster, output).values()) != expected:
            assert app.poll() is None, app.communicate()[0][-1200:]
            assert time.monotonic() < deadline, "the app's output never came to all records"
            time.sleep(2)
        # Each bad record is one dead letter (copies a task run again wrote share its id).
        bad = RECORDS // BAD_EVERY
        while len(_dead_letter_ids(cluster, source)) != bad:
            assert time.monotonic() < deadline, f"dead letters: {_dead_letter_ids(cluster, source)}"
            time.sleep(2)
        # The app's markers carry on past the loss: its watermark reaches records published
        # after it, from the least over the buckets of each one's newest event time.
        newest = _newest_times(cluster, source)
        while _output_watermark(cluster, output, app_name) < min(newest) - LATENESS_MS:
            assert time.monotonic() < deadline, "the app's markers stopped at the loss"
            time.sleep(2)
        # The quiet input's buckets are ticked on through the app's tick stream.
        while sum(end_offsets(cluster.settings, tick_stream(app_name)).values()) == 0:
            assert time.monotonic() < deadline, "the app published no tick after the loss"
            time.sleep(2)
    finally:
        publisher.join()
        os.killpg(app.pid, signal.SIGINT)
        printed, _ = app.communicate(timeout=120)
    assert app.returncode == 0, printed

    # A reader counts a record once by its id (a task run again after the loss may have
    # written copies, which carry the same id): each id once, each record there.
    published = _by_id(cluster, source)
    assert sorted(published) == sorted(f"r{n}" for n in range(RECORDS) if n % BAD_EVERY)
    assert min(_in_sync(cluster, source)) == 2

    start_broker(cluster)  # starts the node that is down
    deadline = time.monotonic() + 120
    while _in_sync(cluster, source) != [3, 3, 3]:
        assert time.monotonic() < deadline, _in_sync(cluster, source)
        time.sleep(1)


def _dead_letter_ids(workspace: Workspace, stream: str) -> set[str | None]:
    """The ids of the dead letters of `stream`'s readers (none before the first makes it)."""
    try:
        letters = tail(
            dead_letter_stream(stream), TailStart(from_beginning=True), settings=workspace.settings
        )
        return {letter.id for letter in letters}
    except StreamNotFoundError:
        return set()


def _newest_times(workspace: Workspace, stream: str) -> list[int]:
    """Each bucket's newest event time among the records of `stream` (bad ones have none)."""
    newest: dict[int, int] = {}
    for record in tail(stream, TailStart(from_beginning=True), settings=workspace.settings):
        newest[record.bucket] = max(newest.get(record.bucket, 0), int(record.value["time"]))
    return list(newest.values())


def _output_watermark(workspace: Workspace, stream: str, app: str) -> int:
    """The newest watermark `app`'s markers on `stream` promise (0 before any)."""
    found, _ = latest_markers(workspace.settings, {})
    return found.get(stream, {}).get(app, 0)


def _by_id(workspace: Workspace, stream: str) -> dict[str, int]:
    """Each record's `n` by its id; copies of a record must be the same record."""
    found: dict[str, int] = {}
    for record in tail(stream, TailStart(from_beginning=True), settings=workspace.settings):
        assert found.setdefault(record.id, int(record.value["n"])) == int(record.value["n"])
    return found
