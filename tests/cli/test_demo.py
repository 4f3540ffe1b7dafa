"""`millrace demo`, the README's main job, run as a newcomer runs it: live, then Ctrl-C.

The demo gets a workspace of its own, with its own Kafka and Redis on free ports, as on a
fresh machine. The test waits for the first closed window's top 3 per topic, sends SIGINT as
Ctrl-C does, and checks that the four apps stopped cleanly and that what the demo printed is
what the Ranker's result table holds. The pipeline's results are checked against plain Python
in tests/examples/test_trending.py, over a fixed input.
"""

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from millrace.cli.demo import APP_NAMES, RANKER, RANKER_TABLE, topic_line
from millrace.config.workspace import Workspace
from millrace.ops import registry
from millrace.warehouse.result_tables import read_result_rows
from tests.chromium import chromium, save_docs_screenshot, wants_docs_screenshot
from tests.ports import free_port

TOPICS = ["games", "movies", "music", "news", "sports"]
# On the 2-core machine the first top 3 came 90 to 220 s after the start (README, and this
# test's runs); this leaves room for a slower machine without letting a stuck demo hold the
# suite for long.
FIRST_WINDOW_DEADLINE_S = 480
# What the host and its JVM write when the JVM ends under the apps.
_JVM_END = re.compile(
    r"Spark's JVM ended|Uncaught exception|fatal error|OutOfMemoryError|SIG(SEGV|BUS|ABRT)"
)
_WINDOW_LINE = re.compile(r"^  top 3 per topic, window (\d\d:\d\d:\d\d)-(\d\d:\d\d:\d\d) UTC:$")


@pytest.mark.timeout(FIRST_WINDOW_DEADLINE_S + 300)
def test_the_demo_prints_top_events_per_topic_and_stops_its_apps_on_ctrl_c(
    tmp_path: Path,
    millrace: Callable[..., CompletedProcess[str]],
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> None:
    environment = {
        **os.environ,
        "MILLRACE_HOME": str(tmp_path / "workspace"),
        "MILLRACE_KAFKA_PORT": str(free_port()),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "MILLRACE_REDIS_PORT": str(free_port()),
    }
    workspace = Workspace.locate(environment)
    dashboard_port = free_port()
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "millrace.cli.main",
            "demo",
            "--dashboard-port",
            str(dashboard_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    )
    lines: list[str] = []
    first_window = threading.Event()
    reader = threading.Thread(target=_read, args=(demo, lines, first_window), daemon=True)
    reader.start()
    try:
        shown = _first_window_shown(demo, first_window)
        if not shown:
            reader.join(timeout=10)  # the lines that say why
        assert shown, "\n".join(lines) + _ends_of_app_logs(workspace)
        dashboard = f"http://127.0.0.1:{dashboard_port}/ui/"
        assert f"dashboard: {dashboard} (the pipeline live in a browser)" in lines
        _look_at_the_dashboard(dashboard)
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=180)
        reader.join(timeout=10)
        output = "\n".join(lines)

        assert demo.returncode == 0, output
        assert "interrupted" in lines, output
        summary = re.search(
            r"^done: published \d+ events and (\d+) malformed records; "
            r"(\d+) routed to trending\.events\.dlq this run \((\d+) there in all\)"
            r"(?:, (\d+) not read yet: the next run routes them)?;",
            output,
            re.M,
        )
        assert summary, output
        malformed, routed, in_all, not_read = (int(part or 0) for part in summary.groups())
        # A fresh workspace: every malformed record of the run is routed or said to be unread.
        assert malformed > 0 and routed == in_all and routed + not_read == malformed, output
        assert re.search(r"first top-K after \d+ s; [1-9]\d* windows shown", output), output
        for app in APP_NAMES:
            assert registry.load(workspace, app).status == "stopped", output

        heading = next(index for index, line in enumerate(lines) if _WINDOW_LINE.match(line))
        start, end = _WINDOW_LINE.match(lines[heading]).groups()
        printed = list(
            itertools.takewhile(lambda line: line.startswith("    "), lines[heading + 1 :])
        )
        stored = sorted(
            (
                row
                for row in read_result_rows(workspace, RANKER, RANKER_TABLE)
                if f"{row['window_start']:%H:%M:%S}" == start
            ),
            key=lambda row: row["topic"],
        )
        assert stored and {f"{row['window_end']:%H:%M:%S}" for row in stored} == {end}
        assert {row["topic"] for row in stored} <= set(TOPICS)
        assert printed == [topic_line(row) for row in stored], output
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        # The apps a failed demo left running (each stop is a new process: only those).
        for app in {record.name for record in registry.list_apps(workspace)} & set(APP_NAMES):
            if registry.load(workspace, app).status == "running":
                millrace_subprocess("stop", app, environment=environment)
        millrace("down", environment=environment)


def _first_window_shown(demo: subprocess.Popen, first_window: threading.Event) -> bool:
    """Whether the demo printed its first window's top 3 before the deadline; a demo that
    ended first (an error it printed) fails the test at once."""
    deadline = time.monotonic() + FIRST_WINDOW_DEADLINE_S
    while time.monotonic() < deadline:
        if first_window.wait(1):
            return True
        if demo.poll() is not None:
            return False
    return False


def _look_at_the_dashboard(dashboard: str) -> None:
    """The dashboard shows the demo's pipeline, the Filterer feeding the Joiner through the
    stream its SQL inserts into; with MILLRACE_DOCS_SCREENSHOT=1, as docs/dashboard.png."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1900, "height": 760})
        page.goto(dashboard)
        for app in APP_NAMES:
            page.wait_for_selector(f'[data-node="app:{app}"]', timeout=60_000)
        for source, target in (
            ("stream:trending.events", "app:trending_filterer"),
            ("app:trending_filterer", "stream:trending.filtered"),
            ("stream:trending.filtered", "app:trending_joiner"),
            (f"app:{RANKER}", f"result_table:{RANKER}.{RANKER_TABLE}"),
        ):
            edge = f'[data-source="{source}"][data-target="{target}"]'
            page.wait_for_selector(edge, state="attached", timeout=30_000)
        if wants_docs_screenshot():
            save_docs_screenshot(page)


def _read(demo: subprocess.Popen, lines: list[str], first_window: threading.Event) -> None:
    """Collect the demo's lines; set `first_window` once the first window's top 3 is printed
    whole: a line for each topic, or fewer and the line after them."""
    heading: int | None = None
    for line in demo.stdout:
        lines.append(line.rstrip("\n"))
        if heading is None:
            heading = len(lines) - 1 if _WINDOW_LINE.match(lines[-1]) else None
        elif len(lines) - 1 - heading == len(TOPICS) or not lines[-1].startswith("    "):
            first_window.set()


def _ends_of_app_logs(workspace: Workspace) -> str:
    """The last lines of the host's and each app's log: why an app crashed, in the report;
    first the host log's lines that tell why Spark's JVM ended, if it did."""
    host_lines = (
        workspace.host_log.read_text(errors="replace").splitlines()
        if workspace.host_log.is_file()
        else []
    )
    jvm_end = [line for line in host_lines if _JVM_END.search(line)][:40]
    ends = ["\n--- the host log's lines about its Spark JVM's end:\n" + "\n".join(jvm_end)]
    for log in [workspace.host_log, *(workspace.app_log(app) for app in APP_NAMES)]:
        tail = log.read_text(errors="replace").splitlines()[-60:] if log.is_file() else []
        ends.append(f"\n--- the end of {log}:\n" + "\n".join(tail))
    return "".join(ends)
