"""A driver's CPU over the last minute, as it records it for `ps`, `top` and `/metrics`: what
it burns shows, the reading goes when it ends, and one a killed driver left counts as none
once it is old; in the host, each app's own CPU and its part of what the apps share, its own
counted in the JVM by scheduler pool."""

import os
import signal
import subprocess
import sys
import threading
import time

from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from millrace.ops.driver_cpu import (
    STALE_SAMPLES,
    DriverCpu,
    last_minute,
    recording,
    recording_host,
)

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
        # Burnt once the recorder took its first sample, which counts from there on: reading
        # /proc while this thread holds the interpreter can take it a while.
        _reading(fresh_workspace, "burner", after_ms=0)
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


def test_each_app_of_a_host_records_its_own_cpu_and_its_part_of_what_the_apps_share(
    fresh_workspace: Workspace,
) -> None:
    """What the host's process used besides the apps' own goes to them in proportion: an app
    that used nothing on its own is given none of it while another used some (and half of
    the little used while neither did)."""
    burnt = {"busy": 0.0}
    running = {"busy", "idle"}

    def own_cpu_s() -> dict[str, float]:
        return {app: burnt.get(app, 0.0) for app in running}

    with recording_host(fresh_workspace, own_cpu_s, every_s=0.2):
        _reading(fresh_workspace, "busy", after_ms=0)  # as in the test above
        start = time.thread_time()
        while time.thread_time() - start < 1.2:
            burnt["busy"] = (time.thread_time() - start) / 2  # half of it its own
        burnt_ms = int(time.time() * 1000)
        busy = _reading(fresh_workspace, "busy", after_ms=burnt_ms)
        idle = _reading(fresh_workspace, "idle", after_ms=burnt_ms)
        assert busy.cpu_s >= 1.0, "its own and the rest, which only it used"
        assert idle.cpu_s < busy.cpu_s / 5
        running.discard("idle")
        deadline = time.monotonic() + WAIT_S
        while fresh_workspace.driver_cpu("idle").exists():
            assert time.monotonic() < deadline, "the reading of an app that ended stayed"
            time.sleep(0.05)
    assert last_minute(fresh_workspace, "busy") is None


def test_the_jvm_counts_the_cpu_of_the_tasks_of_each_scheduler_pool(spark: SparkSession) -> None:
    counted = spark.sparkContext._jvm.dev.millrace.spark.AppCpu
    counted.install(spark.sparkContext._jsc.sc())
    pool = f"pool_{threading.get_native_id()}_{time.monotonic_ns()}"
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    try:
        spark.range(2_000_000).selectExpr("sum(sqrt(id))").collect()
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
    # The listener bus hands the tasks' ends on a moment after the job returns.
    deadline = time.monotonic() + WAIT_S
    while counted.cpuNanos(pool) == 0:
        assert time.monotonic() < deadline, "the pool's tasks were not counted"
        time.sleep(0.05)
    assert counted.cpuNanos(f"{pool}_other") == 0
