"""Apps deployed into one host: one Spark application, each app stopped, restarted, rolled
back or failed alone while the others' micro-batches go on and their results stay exact.

The apps count records per category into a result table merged by key, so the batches a
rollback recomputes rewrite the same rows; every count is compared with plain Python's.
"""

import os
import signal
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from millrace.apps.options import RunOptions
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import ResultTableNotFoundError
from millrace.ops import checkpoints, host_inbox, lifecycle, registry
from millrace.warehouse.result_tables import read_result_rows

APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
CREATE FUNCTION checked AS '{module}.checked';
CREATE TABLE per_category WITH (mode = 'updates') AS
SELECT checked(category) AS category, COUNT(*) AS n FROM events GROUP BY checked(category);
"""
# The apps' function: a category "boom" makes it raise, as a user's bug would.
FUNCTIONS = """
def checked(category: str) -> str:
    if category == "boom":
        raise ValueError("a category the function cannot take: boom")
    return category
"""
MENDED = """
def checked(category: str) -> str:
    return "mended" if category == "boom" else category
"""
TABLE_QUERY = "table.per_category"
WAIT_S = 600.0  # generous: the machine running the suite may be busy with other Spark work


def _publish(workspace: Workspace, stream: str, categories: list[str]) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for number, category in enumerate(categories):
            publisher.send(
                {"event_time": f"2026-01-01T00:00:{number % 60:02d}Z", "category": category}
            )


def _counts(workspace: Workspace, app: str) -> Counter[str]:
    try:
        rows = read_result_rows(workspace, app, "per_category")
    except ResultTableNotFoundError:
        return Counter()
    return Counter({str(row["category"]): int(row["n"]) for row in rows})


def _batches(workspace: Workspace, app: str) -> int:
    return sum(1 for batch in checkpoints.history(workspace, app) if batch.query == TABLE_QUERY)


def _wait(what: str, check: Callable[[], bool], workspace: Workspace, *apps: str) -> None:
    """Wait until `check()` holds; fail with the apps' logs and the host's if time is up."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            logs = [workspace.app_log(app) for app in apps] + [workspace.host_log]
            shown = "\n".join(f"--- {log}\n{log.read_text()}" for log in logs if log.is_file())
            pytest.fail(f"no {what} within {WAIT_S:.0f} s:\n{shown}")
        time.sleep(0.25)


@pytest.mark.timeout(1800)
def test_apps_in_one_host_stop_restart_roll_back_fail_and_change_code_alone(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = uuid.uuid4().hex[:8]
    module = f"host_functions_{run}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(FUNCTIONS))
    # Deployed from the folder that holds the function's module, as a user's code is.
    monkeypatch.chdir(tmp_path)
    names = {side: f"hosted_{side}_{run}" for side in ("a", "b", "c")}
    streams = {side: f"test.hosted-{side}.{run}" for side in names}
    sources = {}
    for side, name in names.items():
        create_stream(workspace.settings, streams[side], buckets=2)
        sources[side] = tmp_path / f"{side}.sql"
        sources[side].write_text(APP.format(name=name, stream=streams[side], module=module))
    options = RunOptions(Trigger.parse("interval:1s"), hosted=True)
    a, b, c = names["a"], names["b"], names["c"]
    published = {side: Counter[str]() for side in names}

    def publish(side: str, categories: list[str]) -> None:
        _publish(workspace, streams[side], categories)
        published[side].update(categories)

    def exact(side: str) -> Callable[[], bool]:
        return lambda: _counts(workspace, names[side]) == published[side]

    try:
        first = lifecycle.deploy(workspace, str(sources["a"]), options)
        second = lifecycle.deploy(workspace, str(sources["b"]), options)
        host = host_inbox.running_host(workspace)
        assert host is not None
        assert first.pid == second.pid == host.pid, "both apps run in the one host"
        publish("a", ["x", "y", "x"])
        publish("b", ["p", "q", "p", "p"])
        _wait("a's first counts", exact("a"), workspace, a, b)
        _wait("b's first counts", exact("b"), workspace, a, b)

        lifecycle.stop(workspace, a)
        assert registry.load(workspace, a).status == "stopped"
        assert registry.load(workspace, b).status == "running"
        before = _batches(workspace, b)
        publish("a", ["y"])
        publish("b", ["q", "r"])
        _wait("b's counts while a is stopped", exact("b"), workspace, b)
        assert _batches(workspace, b) > before, "b ran micro-batches while a was stopped"
        assert _counts(workspace, a) == Counter({"x": 2, "y": 1}), "a read nothing stopped"

        restarted = lifecycle.restart(workspace, a)
        assert restarted.pid == host.pid
        _wait("a's counts after its restart", exact("a"), workspace, a, b)

        lifecycle.rollback(workspace, a, to_batch=0)
        assert registry.load(workspace, a).pid == host.pid
        publish("b", ["p"])
        publish("a", ["z"])
        _wait("a's counts recomputed after its rollback", exact("a"), workspace, a, b)
        _wait("b's counts during a's rollback", exact("b"), workspace, a, b)

        lifecycle.deploy(workspace, str(sources["c"]), options)
        publish("c", ["boom"])
        _wait("c's failure", lambda: registry.load(workspace, c).status == "crashed", workspace, c)
        failed = workspace.app_log(c).read_text()
        function = tmp_path / f"{module}.py"
        assert (
            f"error[sql]: app '{c}' stopped: its function raised ValueError: a category the "
            f"function cannot take: boom, at {function}:4 (in checked)"
        ) in failed, failed
        assert "Traceback" not in failed

        # Mended, c's function runs as it is now: the host imports an app's code afresh.
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(MENDED))
        lifecycle.restart(workspace, c)
        _wait(
            "c's counts with its mended function",
            lambda: _counts(workspace, c) == Counter({"mended": 1}),
            workspace,
            c,
        )
        publish("b", ["s"])
        publish("a", ["x"])
        _wait("b's counts after c failed", exact("b"), workspace, a, b)
        _wait("a's counts after c failed", exact("a"), workspace, a, b)
        assert host_inbox.running_host(workspace) == host, "the host outlived c's failure"
    finally:
        for name in (a, b, c):
            if registry.is_deployed(workspace, name):
                lifecycle.stop(workspace, name)
        ending = host_inbox.running_host(workspace)
        if ending is not None:
            os.kill(ending.pid, signal.SIGTERM)
            deadline = time.monotonic() + 120
            while host_inbox.running_host(workspace) is not None and time.monotonic() < deadline:
                time.sleep(0.2)
