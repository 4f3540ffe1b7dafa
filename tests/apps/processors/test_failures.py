"""A processor app whose driver is killed with kill -9 mid-stream loses and doubles nothing."""

import uuid
from collections import Counter
from pathlib import Path

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from tests.apps.processors.killing import read, run_killed_and_restarted, unique_values

START_MS = 1_767_225_600_000
KEYS = 20

PROCESSOR = """
from millrace import Input, Processor, ValueState


class RunningCount(Processor):
    name = "{name}"
    # Records are published without a key, so the two buckets can run seconds apart, and
    # Spark's watermark follows the one ahead: the hour of lateness keeps every record in.
    inputs = [Input("{source}", key="key", time="time", lateness="1h")]
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


def test_a_driver_killed_mid_stream_and_restarted_loses_and_doubles_no_production(
    workspace: Workspace, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    source, output = f"test.counts-in.{run}", f"test.counts-out.{run}"
    create_stream(workspace.settings, source, buckets=2)
    create_stream(workspace.settings, output)
    module = tmp_path / "running_count.py"
    module.write_text(PROCESSOR.format(name=f"running_count_{run}", source=source, output=output))
    _publish(workspace, source, range(0, 3000))

    run_killed_and_restarted(
        workspace,
        module,
        "RunningCount",
        watched_output=output,
        while_running=lambda: _publish(workspace, source, range(3000, 6000)),
        after_kill=lambda: _publish(workspace, source, range(6000, 9000)),
    )

    values = unique_values(read(workspace, output))
    assert sorted(value["number"] for value in values) == list(range(9000))
    # State is exactly-once: each key's running count went 1, 2, ... with no record counted
    # twice or missed, whatever the kill interrupted.
    per_key = Counter(f"k{number % KEYS}" for number in range(9000))
    for key, total in per_key.items():
        counts = sorted(value["n"] for value in values if value["key"] == key)
        assert counts == list(range(1, total + 1))
