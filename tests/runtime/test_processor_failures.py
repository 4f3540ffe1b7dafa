"""A processor app whose driver is killed with kill -9 mid-stream loses and doubles nothing.

The app runs as `millrace run file.py:Class` does for a user, in a process group of its own,
killed whole (Python and Spark's JVM) with SIGKILL while it works, then started again.
"""

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from millrace.bus.publisher import Publisher
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace

START_MS = 1_767_225_600_000
KEYS = 20

PROCESSOR = """
from millrace import Input, Processor, ValueState


class RunningCount(Processor):
    name = "{name}"
    inputs = [Input("{source}", key="key", time="time")]
    seen = ValueState(int)

    def on_record(self, key, record, ctx):
        self.seen.set(self.seen.get(0) + 1)
        ctx.produce("{output}", {{"key": key, "n": self.seen.get(), "number": record["number"]}})
"""


def _publish(workspace: Workspace, stream: str, numbers: range) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for number in numbers:
            publisher.send(
                {"key": f"k{number % KEYS}", "number": number, "time": START_MS + number}
            )


def _productions(workspace: Workspace, stream: str) -> list:
    return list(tail(stream, TailStart(from_beginning=True), settings=workspace.settings))


def test_a_driver_killed_mid_stream_and_restarted_loses_and_doubles_no_production(
    workspace: Workspace, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.counts-in.{run}", f"test.counts-out.{run}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, output)
    module = tmp_path / "running_count.py"
    module.write_text(PROCESSOR.format(name=f"running_count_{run}", source=source, output=output))
    command = [sys.executable, "-m", "millrace.cli.main", "run", f"{module}:RunningCount"]
    _publish(workspace, source, range(0, 3000))

    app = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _productions(workspace, output):
            assert app.poll() is None, "the app stopped by itself"
            assert time.monotonic() < deadline, "no production within 2 minutes"
            time.sleep(0.5)
        _publish(workspace, source, range(3000, 6000))
        time.sleep(1.0)
    finally:
        os.killpg(app.pid, signal.SIGKILL)
        app.wait()

    _publish(workspace, source, range(6000, 9000))
    restarted = subprocess.run(
        [*command, "--available-now"], capture_output=True, text=True, env=os.environ, check=False
    )
    assert restarted.returncode == 0, restarted.stderr

    productions = _productions(workspace, output)
    by_id: dict[str, dict] = {}
    for production in productions:
        # A micro-batch the kill interrupted runs again and writes the same ids and values;
        # a millrace reader keeps one of each.
        assert by_id.setdefault(production.id, production.value) == production.value
    assert sorted(value["number"] for value in by_id.values()) == list(range(9000))
    # State is exactly-once: each key's running count went 1, 2, ... with no record counted
    # twice or missed, whatever the kill interrupted.
    per_key = Counter(f"k{number % KEYS}" for number in range(9000))
    for key, total in per_key.items():
        counts = sorted(value["n"] for value in by_id.values() if value["key"] == key)
        assert counts == list(range(1, total + 1))
