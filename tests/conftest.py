"""Fixtures shared by the whole suite: one workspace, one real Kafka broker and one
SparkSession per test process (each pytest-xdist worker of `make test`), all on loopback, all
stopped at the end; and the order the files run in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.bus.broker import start_broker, stop_broker
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace, init_workspace
from millrace.engine.session import spark_session, stop_spark_session
from millrace.serving.server import start_redis, stop_redis
from tests.durations import CACHE_KEY, SECONDS_BY_FILE, SLOW_S
from tests.jvm_options import CHILD_JVM_OPTIONS, CHILD_JVM_TIERED
from tests.ports import free_port


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start, however the suite itself was started.

    Tests stop apps and the demo with SIGINT, as a user's Ctrl-C does; a process that a
    non-interactive shell started in the background (`cmd &`) ignores SIGINT, and so would
    each process it starts, since an ignored signal stays ignored across exec.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slowest files first (tests/durations.py), each file's tests in their order, so that
    the two workers of `make test` finish together."""
    cache = getattr(config, "cache", None)
    seconds = (cache.get(CACHE_KEY, None) if cache is not None else None) or SECONDS_BY_FILE
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0))


_SECONDS_RUN: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each file's seconds (in the controller, with pytest-xdist)."""
    _SECONDS_RUN[report.nodeid.split("::")[0]] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Record the slow files' seconds in pytest's cache, for the next run's order."""
    cache = getattr(session.config, "cache", None)
    if cache is None or hasattr(session.config, "workerinput"):
        return
    recorded = {**(cache.get(CACHE_KEY, None) or {}), **_SECONDS_RUN}
    cache.set(
        CACHE_KEY,
        {
            name: round(seconds)
            for name, seconds in recorded.items()
            if seconds >= SLOW_S and (session.config.rootpath / name).is_file()
        },
    )


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """The test run's workspace, with its broker up; MILLRACE_* point every client at it."""
    root = tmp_path_factory.mktemp("workspace")
    environment = {
        "MILLRACE_HOME": str(root),
        "MILLRACE_KAFKA_PORT": str(free_port()),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "MILLRACE_SPARK_MASTER": "local[2]",
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "2",
        "MILLRACE_REDIS_PORT": str(free_port()),
    }
    previous = {name: os.environ.get(name) for name in [*environment, CHILD_JVM_OPTIONS]}
    os.environ.pop("MILLRACE_KAFKA", None)
    os.environ.pop("MILLRACE_REDIS", None)
    os.environ.update(environment)
    located = Workspace.locate()
    # Set once the workspace is located, so that its settings (and the test process's own
    # JVM, started from them) go without it, and the processes the tests start have it.
    os.environ[CHILD_JVM_OPTIONS] = CHILD_JVM_TIERED
    init_workspace(located)
    start_broker(located)
    yield located
    stop_broker(located)
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def redis_url(workspace: Workspace) -> Iterator[str]:
    """The test run's Redis, started in the workspace on a free port; its URL."""
    status = start_redis(workspace)
    yield status.url
    stop_redis(workspace)


@pytest.fixture(scope="session")
def settings(workspace: Workspace) -> Settings:
    return workspace.settings


@pytest.fixture(scope="session")
def spark(settings: Settings) -> Iterator[SparkSession]:
    session = spark_session(settings, app_name="millrace-tests")
    yield session
    stop_spark_session()


@pytest.fixture
def stream_name() -> str:
    """A stream name no other test uses."""
    return f"test.{uuid.uuid4().hex[:10]}"


@pytest.fixture
def clients_loaded() -> Callable[[str], list[str]]:
    """A function: which of Kafka's, Redis's and Spark's clients Python `code` loads.

    It runs `code` in a fresh interpreter and names the top-level modules among
    `confluent_kafka`, `redis` and `pyspark` that are then loaded, in that order.
    """

    def loaded(code: str) -> list[str]:
        clients = ("confluent_kafka", "redis", "pyspark")
        check = f"{code}\nimport sys; print(*[m for m in {clients!r} if m in sys.modules])"
        ran = subprocess.run(
            [sys.executable, "-c", check], capture_output=True, text=True, check=True
        )
        return ran.stdout.split()

    return loaded


@pytest.fixture
def fresh_workspace(tmp_path: Path) -> Workspace:
    """An initialized workspace of its own, on free ports, with no broker running."""
    environment = {
        "MILLRACE_HOME": str(tmp_path / "workspace"),
        "MILLRACE_KAFKA_PORT": str(free_port()),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "MILLRACE_REDIS_PORT": str(free_port()),
    }
    located = Workspace.locate({**os.environ, **environment})
    init_workspace(located)
    return located


@pytest.fixture(scope="session")
def paused_app(spark: SparkSession, workspace: Workspace) -> str:
    """An app that read 10 records of its stream and stopped, with 5 published since."""
    from tests.monitor.apps import run_paused_app

    return run_paused_app(spark, workspace, read=10, waiting=5)
