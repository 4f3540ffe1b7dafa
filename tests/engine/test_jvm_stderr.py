"""The JVM's stderr reaches the terminal without PySpark's TransformWithStateInPandas chatter."""

import subprocess
import sys
import time

import pytest

from millrace.engine.jvm_stderr import relayed_stderr

# What pyspark's transform_with_state_driver_worker.py prints at a processor query's start
# (each message ends with a newline of its own, then print's), among lines that must stay.
WORKER_OUTPUT = (
    "WARNING: Using incubator modules: jdk.incubator.vector\n"
    "Starting Streaming TransformWithStateInPandas Python worker.\n\n"
    "Streaming TransformWithStateInPandas Python worker finish init stage of Python runner. "
    "Received UDF from JVM: <bound method transformWithStateUDF>.\n\n"
    "02:37:23 ERROR MicroBatchExecution: Query app.processor terminated with error\n"
    "\n"
    "java.io.IOException: No space left on device"
)


def test_worker_chatter_is_dropped_and_every_other_line_copied(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with relayed_stderr() as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.stderr.write({WORKER_OUTPUT!r})"],
            stderr=stderr,
        )
    child.wait()

    copied = ""
    deadline = time.monotonic() + 10
    while not copied.endswith("No space left on device") and time.monotonic() < deadline:
        time.sleep(0.05)
        copied += capfd.readouterr().err
    assert copied == (
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        "02:37:23 ERROR MicroBatchExecution: Query app.processor terminated with error\n"
        "\n"
        "java.io.IOException: No space left on device"
    )
