"""The processor examples as live apps, for the tests that run them on Spark: each example's
source with `Live` and `Batch` subclasses of their own name, input and output streams, written
into a module that `millrace run file.py:Class` loads, as a user would."""

import uuid
from pathlib import Path

from millrace.bus.publisher import Publisher
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from tests.examples import EXAMPLES

LIVE_CLASS = """

class Live{base}({base}):
    name = "{name}"
    # The test's producer waits while the app is killed and restarted, then goes on with
    # records dated before the wait: a longer idle timeout than the wait keeps them on time.
    inputs = [
        Input("{source}", key="{key}", time="time", lateness="{lateness}", idle_timeout="10m")
    ]
    {first_attribute} = "{first_output}"
    {second_attribute} = "{second_output}"


class Batch{base}(Live{base}):
    {first_attribute} = "{first_output}.batch"
    {second_attribute} = "{second_output}.batch"
"""


def live_module(
    tmp_path: Path,
    workspace: Workspace,
    example: str,
    base: str,
    key: str,
    lateness: str,
    outputs: dict[str, str],
) -> tuple[Path, str, dict[str, str]]:
    """The example's source with its Live and Batch subclasses; the input and output streams.

    `outputs` maps each output stream attribute to a short name; the streams get a unique
    suffix and are created, as is the input stream (one bucket: arrival order is kept).
    """
    run = uuid.uuid4().hex[:8]
    source = f"test.{example}-in.{run}"
    streams = {attribute: f"test.{short}.{run}" for attribute, short in outputs.items()}
    create_stream(workspace.settings, source, buckets=1)
    for stream in streams.values():
        create_stream(workspace.settings, stream)
        create_stream(workspace.settings, f"{stream}.batch")
    (first_attribute, first_output), (second_attribute, second_output) = streams.items()
    module = tmp_path / f"live_{example}_{run}.py"
    module.write_text(
        (EXAMPLES / f"{example}.py").read_text()
        + LIVE_CLASS.format(
            base=base,
            name=f"{example}_{run}",
            source=source,
            key=key,
            lateness=lateness,
            first_attribute=first_attribute,
            first_output=first_output,
            second_attribute=second_attribute,
            second_output=second_output,
        )
    )
    return module, source, streams


def live_zeitgeist_module(tmp_path: Path, workspace: Workspace) -> tuple[Path, str, dict[str, str]]:
    """`live_module` of examples/zeitgeist.py: `LiveZeitgeist` keyed by query, 5 s of lateness."""
    return live_module(
        tmp_path,
        workspace,
        "zeitgeist",
        "Zeitgeist",
        "query",
        "5s",
        {"counts_stream": "query-counts", "anomalies_stream": "query-anomalies"},
    )


def publish(workspace: Workspace, stream: str, records: list[dict]) -> None:
    with Publisher(stream, settings=workspace.settings) as publisher:
        for record in records:
            publisher.send(record)
