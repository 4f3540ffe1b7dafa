"""Waiting on an app deployed by a test, with its log in the failure message, and its gauges."""

import time
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from millrace.api.app import create_app
from millrace.config.workspace import Workspace
from millrace.ops import registry

WAIT_S = 600  # generous: the machine running the suite may be busy with other Spark work
# Each look reads the app's record and log, and what `check` reads: a fraction of a second.
_POLL_S = 0.25


def wait_for(what: str, check: Callable[[], bool], app: str, workspace: Workspace) -> None:
    """Wait until `check()` holds; fail, with the app's log, if the app ends or time is up."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        record = registry.load(workspace, app)
        log = Path(record.log).read_text() if Path(record.log).is_file() else ""
        assert record.status == "running", f"app {record.status} while waiting for {what}:\n{log}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s:\n{log}"
        time.sleep(_POLL_S)


def app_gauges(workspace: Workspace, app: str) -> dict[str, float]:
    """The app's gauges at `/metrics` of the HTTP service, by name."""
    response = TestClient(create_app(workspace)).get("/metrics")
    assert response.status_code == 200
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.labels == {"app": app}
    }
