"""A driver's CPU over the last minute, as it records it for `ps`, `top` and `/metrics`: what
it burns shows, the reading goes when it ends, and one a killed driver left counts as none
once it is old."""

import os
import signal
import subprocess
import sys
import time

from millrace.config.workspace import Workspace
from millrace.ops.driver_cpu import STALE_SAMPLES, DriverCpu, last_minute, recording

WAIT_S = 120.0
"""How long a reading may take to come, on a machine busy with other tests."""
# A driver that records every 0.1 s until it is killed.
KILLED_DRIVER = """
import sys, threading
from millrace.config.workspace import Workspace
from millrace.ops.driver_cpu import recording
with recording(Workspace.locate({{"MILLRACE_HOME": {home!r}}}), "killed", every_s=0.1):
    print("recording", flush=True)
    threading.Event().wait()
"""


def _reading(workspace: Workspace, app: str, *, after_ms: int) -> DriverCpu:
    """The first reading of `app`'s driver taken after `after_ms`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        reading = last_minute(workspace, app)
        if reading is not None and reading.at_ms > after_ms:
            return reading
        assert time.monotonic() < deadline, f"no reading of {app} within {WAIT_S} s"
        time.sleep(0.05)


def test_a_driver_that_burns_a_second_of_cpu_records_at_least_that(
    fresh_workspace: Workspace,
) -> None:
    with recording(fresh_workspace, "burner", every_s=0.2):
        start = time.thread_time()
        while time.thread_time() - start < 1.2:
            pass
        burnt_ms = int(time.time() * 1000)
        reading = _reading(fresh_workspace, "burner", after_ms=burnt_ms)

    assert reading.cpu_s >= 1.0
    assert reading.span_s > 0 and reading.cores > 0
    assert last_minute(fresh_workspace, "burner") is None


def test_a_reading_a_killed_driver_left_counts_as_none_once_it_is_old(
    fresh_workspace: Workspace,
) -> None:
    code = KILLED_DRIVER.format(home=str(fresh_workspace.root))
    driver = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert driver.stdout is not None and driver.stdout.readline() == "recording\n"
        reading = _reading(fresh_workspace, "killed", after_ms=0)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()

    left = last_minute(fresh_workspace, "killed", now_ms=reading.at_ms)
    assert left is not None and left.at_ms >= reading.at_ms
    stale_ms = left.at_ms + int(STALE_SAMPLES * 0.1 * 1000) + 1
    assert last_minute(fresh_workspace, "killed", now_ms=stale_ms) is None
