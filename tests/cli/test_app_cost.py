"""What a deployed app costs, as a user sees it: the micro-batches it ran in the last minute
and the CPU seconds its driver used in the last minute, in `ps`, `top`, `/metrics` and the
dashboard.

The app runs detached, as `millrace deploy` starts it for a user, while records keep coming
in, so that it keeps running micro-batches; its driver's CPU is its own process tree's.
"""

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from playwright.sync_api import Page

from millrace.api.app import background_service
from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.records import format_time_ms
from tests.chromium import chromium
from tests.cli.deployed import app_gauges, wait_for
from tests.ports import free_port

APP = """
CREATE APPLICATION {name};
CREATE INPUT TABLE events (event_time, category)
  FROM STREAM('{stream}') TIME event_time LATENESS '1 hour';
INSERT INTO STREAM('{copies}') SELECT category FROM events;
"""
DRIVER_CPU = re.compile(r"(\d+\.\d)s \((\d+)%\)")
"""How `ps`, `top` and the dashboard show the driver's CPU: seconds, and the share of a core."""
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"


@pytest.fixture
def deployed(
    workspace: Workspace,
    tmp_path: Path,
    millrace_subprocess: Callable[..., CompletedProcess[str]],
) -> Iterator[str]:
    """A SQL app deployed with a one-second trigger, fed a record every half second."""
    run = uuid.uuid4().hex[:8]
    name, stream, copies = f"cost_{run}", f"test.cost.{run}", f"test.cost-copies.{run}"
    create_stream(workspace.settings, stream)
    create_stream(workspace.settings, copies)
    source = tmp_path / "app.sql"
    source.write_text(APP.format(name=name, stream=stream, copies=copies))
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(workspace, stream, stop), daemon=True)
    feeder.start()
    started = millrace_subprocess("deploy", str(source), "--trigger", "interval:1s", "--isolated")
    assert started.returncode == 0, started.stderr
    try:
        yield name
    finally:
        stop.set()
        feeder.join()
        stopped = millrace_subprocess("stop", name)
        assert stopped.returncode == 0, stopped.stderr


def _feed(workspace: Workspace, stream: str, stop: threading.Event) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        while not stop.is_set():
            publisher.send({"event_time": format_time_ms(int(time.time() * 1000)), "category": "a"})
            publisher.flush()
            stop.wait(0.5)


def _ps_row(millrace: Callable[..., CompletedProcess[str]], app: str) -> dict[str, object]:
    listed = millrace("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = [row for row in map(json.loads, listed.stdout.splitlines()) if row["app"] == app]
    return row


def _costs_shown(batches: object, cpu: object) -> bool:
    """Whether a batch count and a driver's CPU, as shown, say the app ran and cost CPU."""
    found = DRIVER_CPU.fullmatch(str(cpu))
    return int(str(batches)) > 0 and found is not None and float(found[1]) > 0


# A start of a Spark application and its first micro-batches, on a machine shared with other
# Spark work, takes longer than the suite's default limit.
@pytest.mark.timeout(1200)
def test_a_deployed_app_shows_its_batches_and_its_drivers_cpu_of_the_last_minute(
    workspace: Workspace,
    deployed: str,
    millrace: Callable[..., CompletedProcess[str]],
) -> None:
    app = deployed

    def ps_shows_costs() -> bool:
        row = _ps_row(millrace, app)
        return row["batches_per_min"] is not None and _costs_shown(
            row["batches_per_min"], row["driver_cpu_per_min"]
        )

    wait_for("its batches and CPU in ps", ps_shows_costs, app, workspace)
    shown = millrace("ps")
    header, *lines = shown.stdout.splitlines()
    [line] = [line for line in lines if line.startswith(app + " ")]
    start, end = header.index("BATCHES_PER_MIN"), header.index("PROCESSING_LAG")
    batches, cpu = line[start:end].split(maxsplit=1)
    assert _costs_shown(batches, cpu.strip()), shown.stdout
    # The driver's memory: its Python process, Spark's JVM and workers, hundreds of MiB.
    memory = re.fullmatch(r"([\d,]+) MiB", str(_ps_row(millrace, app)["driver_memory"]))
    assert memory is not None and int(memory[1].replace(",", "")) > 200

    top = millrace("top", "--once", environment={"COLUMNS": "250"})
    assert top.returncode == 0, top.stderr
    [titles] = [row for row in top.stdout.splitlines() if "┃" in row and "app" in row]
    [cells] = [row for row in top.stdout.splitlines() if f" {app} " in row]
    named = dict(
        zip(
            [title.strip() for title in titles.strip("┃ ").split("┃")],
            [cell.strip() for cell in cells.strip("│ ").split("│")],
            strict=True,
        )
    )
    assert _costs_shown(named["batches/min"], named["driver cpu/min"]), top.stdout

    gauges = app_gauges(workspace, app)
    assert gauges["millrace_app_batches_last_minute"] > 0, gauges
    assert gauges["millrace_app_driver_cpu_seconds_last_minute"] > 0, gauges

    with (
        background_service(workspace, host="127.0.0.1", port=free_port()) as url,
        chromium() as browser,
    ):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            figures = _dashboard_figures(page, f"{url}/ui/", app, workspace)
        finally:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "app_cost.png"), full_page=True)
    assert _costs_shown(figures["batches/min"], figures["driver cpu/min"]), figures


def _dashboard_figures(page: Page, url: str, app: str, workspace: Workspace) -> dict[str, str]:
    """The app's row of the dashboard's apps table, by header, once it shows its cost."""
    figures: dict[str, str] = {}

    def shown() -> bool:
        page.goto(url)
        headers = page.locator("h2:has-text('Apps') + .panel th").all_inner_texts()
        row = page.locator(f"h2:has-text('Apps') + .panel tr:has(a[href='/ui/apps/{app}']) td")
        figures.update(zip(headers, row.all_inner_texts(), strict=True))
        return figures.get("batches/min", "-") != "-" and _costs_shown(
            figures["batches/min"], figures["driver cpu/min"]
        )

    wait_for("its batches and CPU on the dashboard", shown, app, workspace)
    return figures
