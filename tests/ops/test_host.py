"""Apps deployed into one host: one Spark application, each app stopped, restarted, rolled
back or failed alone while the others' micro-batches go on and their results stay exact, an
isolated app beside them, a second host refused; and the host killed with kill -9 under a
chain of apps, which it recovers exactly.

The apps of the first test count records per category into a result table merged by key, so
the batches a rollback recomputes rewrite the same rows; every count is compared with plain
Python's. The chain is the three apps of tests/apps/crash_pipeline.py, checked against its
answer.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.apps.options import RunOptions
from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.proc_stat import process_tree
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import AlreadyDeployedError, ResultTableNotFoundError
from millrace.ops import checkpoints, driver_cpu, driver_lock, host_inbox, lifecycle, registry
from millrace.warehouse.result_tables import read_result_rows
from tests.apps import crash_pipeline

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
    names = {side: f"hosted_{side}_{run}" for side in ("a", "b", "c", "d")}
    streams = {side: f"test.hosted-{side}.{run}" for side in names}
    sources = {}
    for side, name in names.items():
        create_stream(workspace.settings, streams[side], buckets=2)
        sources[side] = tmp_path / f"{side}.sql"
        sources[side].write_text(APP.format(name=name, stream=streams[side], module=module))
    options = RunOptions(Trigger.parse("interval:1s"), hosted=True)
    a, b, c, d = names["a"], names["b"], names["c"], names["d"]
    published = {side: Counter[str]() for side in names}

    def publish(side: str, categories: list[str]) -> None:
        _publish(workspace, streams[side], categories)
        published[side].update(categories)

    def exact(side: str) -> Callable[[], bool]:
        return lambda: _counts(workspace, names[side]) == published[side]

    try:
        first = lifecycle.deploy(workspace, str(sources["a"]), options)
        second = lifecycle.deploy(workspace, str(sources["b"]), options)
        # d beside them in a driver of its own, as `deploy --isolated` runs it.
        alone = lifecycle.deploy(workspace, str(sources["d"]), replace(options, hosted=False))
        host = host_inbox.running_host(workspace)
        assert host is not None
        assert first.pid == second.pid == host.pid, "both apps run in the one host"
        assert alone.pid != host.pid and not alone.options.hosted
        with pytest.raises(AlreadyDeployedError):
            lifecycle.deploy(workspace, str(sources["d"]), options)  # one driver per app
        publish("a", ["x", "y", "x"])
        publish("b", ["p", "q", "p", "p"])
        publish("d", ["u", "v"])
        _wait("a's first counts", exact("a"), workspace, a, b)
        _wait("b's first counts", exact("b"), workspace, a, b)
        _wait("d's counts in its own driver", exact("d"), workspace, d)
        lifecycle.stop(workspace, d)

        # A second host for the workspace ends at once and leaves the first one be.
        second_host = subprocess.run(
            [sys.executable, "-m", host_inbox.HOST_MODULE, "--serve"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert second_host.returncode != 0
        assert "another host runs in this workspace; this one ends" in second_host.stdout
        assert host_inbox.running_host(workspace) == host

        lifecycle.stop(workspace, a)
        assert registry.load(workspace, a).status == "stopped"
        assert registry.load(workspace, b).status == "running"
        before = _batches(workspace, b)
        publish("a", ["y"])
        publish("b", ["q", "r"])
        _wait("b's counts while a is stopped", exact("b"), workspace, b)
        assert _batches(workspace, b) > before, "b ran micro-batches while a was stopped"
        assert _counts(workspace, a) == Counter({"x": 2, "y": 1}), "a read nothing stopped"
        # What each app costs, as for a driver of its own: b's minute, and none for a stopped.
        _wait(
            "b's CPU reading",
            lambda: driver_cpu.last_minute(workspace, b) is not None,
            workspace,
            b,
        )
        reading = driver_cpu.last_minute(workspace, b)
        assert reading is not None and reading.cpu_s > 0
        _wait(
            "a's CPU reading gone",
            lambda: driver_cpu.last_minute(workspace, a) is None,
            workspace,
            a,
        )

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
        _stop_host(workspace, [a, b, c, d])


# A processor whose answer is its module's LABEL, written to files of one name in two folders.
LABELLER = """
from millrace import Input, Processor

LABEL = "{label}"


class Labeller(Processor):
    name = "{name}"
    inputs = [Input("{source}", key="k", time="ts")]

    def on_record(self, key, record, ctx):
        ctx.produce("{output}", {{"n": record["n"], "label": LABEL}})
"""


@pytest.mark.timeout(1800)
def test_hosted_processors_from_files_of_one_name_each_run_their_own_code_and_its_changes(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Two processors in one host, each from a `labeller.py` of its own whose module-level
    LABEL differs, answer with their own labels; one restarted with its file changed answers
    with the new label from its next micro-batch, the other as before."""
    run = uuid.uuid4().hex[:8]
    names = {side: f"labeller_{side}_{run}" for side in ("a", "b")}
    sources = {side: f"test.label-in-{side}.{run}" for side in names}
    outputs = {side: f"test.label-out-{side}.{run}" for side in names}
    files = {side: tmp_path / side / "labeller.py" for side in names}

    def write(side: str, label: str) -> None:
        files[side].parent.mkdir(exist_ok=True)
        files[side].write_text(
            LABELLER.format(
                label=label, name=names[side], source=sources[side], output=outputs[side]
            )
        )

    def send(side: str, numbers: range) -> None:
        with Publisher(sources[side], settings=workspace.settings, time_field="ts") as publisher:
            for number in numbers:
                publisher.send({"k": "k", "n": number, "ts": 1_767_225_600_000 + number})

    def answered(side: str, expected: set[tuple[int, str]]) -> Callable[[], bool]:
        def seen() -> bool:
            records = tail(
                outputs[side], TailStart(from_beginning=True), settings=workspace.settings
            )
            return {(record.value["n"], record.value["label"]) for record in records} == expected

        return seen

    for side in names:
        create_stream(workspace.settings, sources[side], buckets=1)
        create_stream(workspace.settings, outputs[side], buckets=1)
        write(side, side)
    options = RunOptions(Trigger.parse("interval:1s"), hosted=True)
    apps = list(names.values())
    try:
        for side in names:
            lifecycle.deploy(workspace, f"{files[side]}:Labeller", options)
        assert registry.load(workspace, names["a"]).pid == registry.load(workspace, names["b"]).pid
        for side in names:
            send(side, range(2))
        _wait("a's labels", answered("a", {(0, "a"), (1, "a")}), workspace, *apps)
        _wait("b's labels", answered("b", {(0, "b"), (1, "b")}), workspace, *apps)

        write("b", "b-changed")
        lifecycle.restart(workspace, names["b"])
        for side in names:
            send(side, range(2, 3))
        _wait(
            "b's new label",
            answered("b", {(0, "b"), (1, "b"), (2, "b-changed")}),
            workspace,
            *apps,
        )
        _wait(
            "a's label, as it was", answered("a", {(0, "a"), (1, "a"), (2, "a")}), workspace, *apps
        )
    finally:
        _stop_host(workspace, apps)


# The chain's events and micro-batches: enough micro-batches of the filter for each of the
# host's lives to run two before it is killed, and more.
CHAIN_EVENTS = 24_000
CHAIN_BATCH = 500
HOST_KILLS = 3


@pytest.mark.timeout(2400)
def test_a_chain_of_three_hosted_apps_counts_each_event_once_though_the_host_is_killed(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    """The filter, the processor and the SQL total of crash_pipeline's processor chain, all
    three in one host, which is killed with kill -9 three times while the filter has input
    left: twice whole (its Python process, Spark's JVM and workers), the last time only its
    Spark JVM, on whose end the host ends. Each time the supervisor starts the host again
    and every app recovers from its checkpoint. The total equals the answer: nothing lost,
    nothing counted twice."""
    run = uuid.uuid4().hex[:8]
    source, middle = f"test.host-in.{run}", f"test.host-mid.{run}"
    results = f"test.host-out.{run}"
    for stream, buckets in ((source, 2), (middle, 2), (results, 1)):
        create_stream(workspace.settings, stream, buckets=buckets)
    crash_pipeline.publish(spark, workspace, source, range(CHAIN_EVENTS), CHAIN_EVENTS, run)
    names = {role: f"host_{role}_{run}" for role in ("filter", "processor", "total")}
    templates = {
        "filter": (crash_pipeline.FILTER_APP, "filter.sql", ""),
        "processor": (crash_pipeline.AGG_PROCESSOR, "processor.py", ":CrashAggregation"),
        "total": (crash_pipeline.TOTAL_APP, "total.sql", ""),
    }
    options = RunOptions(Trigger.parse("interval:1s"), hosted=True)
    filter_query = f"insert.{middle}"
    apps = list(names.values())

    def filter_batches() -> int:
        return sum(
            1
            for batch in checkpoints.history(workspace, names["filter"])
            if batch.query == filter_query
        )

    def runs_in(host: host_inbox.HostProcess) -> Callable[[], bool]:
        def running() -> bool:
            holders = [driver_lock.holder(workspace, name) for name in apps]
            return all(holder is not None and holder.pid == host.pid for holder in holders)

        return running

    try:
        for role, (template, file, suffix) in templates.items():
            path = tmp_path / file
            path.write_text(
                template.format(
                    name=names[role],
                    batch=CHAIN_BATCH,
                    source=source,
                    middle=middle,
                    results=results,
                    minute_ms=crash_pipeline.MINUTE_MS,
                )
            )
            lifecycle.deploy(workspace, f"{path}{suffix}", options)
        hosts = []
        for kill in range(1, HOST_KILLS + 1):
            host = _host_after(workspace, hosts)
            _wait("the apps in the host", runs_in(host), workspace, *apps)
            before = filter_batches()
            _wait(
                "two micro-batches of the filter",
                lambda before=before: filter_batches() >= before + 2,
                workspace,
                *apps,
            )
            assert filter_batches() < CHAIN_EVENTS / CHAIN_BATCH, "the filter has input left"
            if kill < HOST_KILLS:
                os.killpg(host.pid, signal.SIGKILL)
            else:
                os.kill(_spark_jvm_of(host.pid), signal.SIGKILL)
            hosts.append(host)
        last = _host_after(workspace, hosts)
        _wait("the apps in the host after the kills", runs_in(last), workspace, *apps)
        for name in apps:
            assert workspace.app_log(name).read_text().count("its host ended") == HOST_KILLS

        answer = crash_pipeline.known_answer(CHAIN_EVENTS)
        kept = sum(n for n, _ in answer.values())
        _wait(
            "every kept event in the middle stream",
            lambda: len(crash_pipeline.middle_records(workspace, middle)[0]) == kept,
            workspace,
            *apps,
        )
        closing = range(CHAIN_EVENTS, CHAIN_EVENTS + crash_pipeline.CLOSING_RECORDS)
        crash_pipeline.publish(spark, workspace, middle, closing, CHAIN_EVENTS, run)

        def totals() -> dict[tuple[int, str], tuple[int, int]]:
            try:
                return crash_pipeline.results_of_table(spark, workspace, names["total"])
            except ResultTableNotFoundError:
                return {}

        _wait(
            "every minute in the total", lambda: totals().keys() >= answer.keys(), workspace, *apps
        )
        assert totals() == answer
    finally:
        _stop_host(workspace, apps)


def _host_after(
    workspace: Workspace, killed: list[host_inbox.HostProcess]
) -> host_inbox.HostProcess:
    """The running host, once it is not one of those `killed` (the supervisor starts anew)."""
    found: list[host_inbox.HostProcess] = []

    def started() -> bool:
        host = host_inbox.running_host(workspace)
        if host is None or host in killed:
            return False
        found.append(host)
        return True

    _wait("the host started again", started, workspace)
    return found[-1]


def _spark_jvm_of(host_pid: int) -> int:
    """The pid of the host's Spark JVM: its one child that runs Java."""
    [jvm] = [
        stat.pid
        for stat in process_tree(host_pid)
        if stat.ppid == host_pid and b"java" in Path(f"/proc/{stat.pid}/cmdline").read_bytes()
    ]
    return jvm


def _stop_host(workspace: Workspace, apps: list[str]) -> None:
    """Stop the test's apps, then the host, and wait for it to end."""
    for name in apps:
        if registry.is_deployed(workspace, name):
            lifecycle.stop(workspace, name)
    ending = host_inbox.running_host(workspace)
    if ending is not None:
        os.kill(ending.pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while host_inbox.running_host(workspace) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
