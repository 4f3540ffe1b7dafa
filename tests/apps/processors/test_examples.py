"""Both examples on live streams: killed with kill -9 mid-stream and restarted, then in batch
over the same records; each output against plain Python over the published records, and the
batch run against ProcessorTester.

Each example runs as a subclass of its own name, input and output streams, written with the
example's source into a module that `millrace run file.py:Class` loads, as a user would.
"""

import importlib.util
import json
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.apps.processors.batch import run_processor_batch
from millrace.config.workspace import Workspace
from millrace.engine.user_code import ship_with_tasks
from millrace.processor import Processor
from millrace.testing import ProcessorTester
from tests.apps.processors.killing import read, run_killed_and_restarted, unique_values
from tests.examples import sessions_cases as sessions
from tests.examples import zeitgeist_cases as zeitgeist
from tests.examples.live_apps import live_module, live_zeitgeist_module, publish


def load(module: Path, name: str) -> type[Processor]:
    spec = importlib.util.spec_from_file_location(module.stem, module)
    loaded = importlib.util.module_from_spec(spec)
    # Registered, so that its classes can be sent to Spark's workers by value.
    sys.modules[module.stem] = loaded
    spec.loader.exec_module(loaded)
    ship_with_tasks(loaded)
    return getattr(loaded, name)


def run_live_then_batch(
    spark: SparkSession,
    workspace: Workspace,
    module: Path,
    base: str,
    source: str,
    streams: dict[str, str],
    arrivals: list[dict],
) -> tuple[dict[str, list[dict]], dict[str, list[dict]], dict[str, list[dict]]]:
    """Run Live killed and restarted over `arrivals` (the last one closes the range), then
    Batch over the range and ProcessorTester over the same records in one micro-batch: the
    values of each, by output attribute, copies of an id dropped."""
    half = len(arrivals) // 2
    publish(workspace, source, arrivals[:half])
    run_killed_and_restarted(
        workspace,
        module,
        f"Live{base}",
        watched_output=next(iter(streams.values())),
        while_running=lambda: publish(workspace, source, arrivals[half:]),
    )
    live = {
        attribute: unique_values(read(workspace, stream)) for attribute, stream in streams.items()
    }

    batch_class = load(module, f"Batch{base}")
    start_ms = min(record["time"] for record in arrivals)
    end_ms = arrivals[-1]["time"]  # the closing record's time: it is left out
    ran = run_processor_batch(spark, workspace, batch_class, start_ms=start_ms, end_ms=end_ms)
    batch = {
        attribute: unique_values(read(workspace, f"{stream}.batch"))
        for attribute, stream in streams.items()
    }
    assert ran.productions == sum(len(values) for values in batch.values())
    assert ran.dead_letters == 0

    tester = ProcessorTester(batch_class)
    tester.feed(source, arrivals[:-1])
    tester.run_batch()
    tester.advance_watermark(end_ms)
    tester.fire_timers()
    in_memory = {
        attribute: tester.values(f"{stream}.batch") for attribute, stream in streams.items()
    }
    return live, batch, in_memory


def same(values: list[dict]) -> list[str]:
    return sorted(json.dumps(value, sort_keys=True) for value in values)


# Two Spark apps start one after the other (the killed one and its restart): slow on a busy
# machine, so more time than the suite's default.
@pytest.mark.timeout(1800)
def test_zeitgeist_live_killed_and_restarted_and_in_batch_matches_plain_python(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    rng = random.Random(21)
    seconds = 100
    cats = [rng.randint(3, 6) for _ in range(seconds)]
    cats[70] = 40  # a spike, once the model is warm
    counts = {
        "cats": cats,
        "dogs": [rng.choice([0, 1, 2]) for _ in range(seconds)],
        # A burst, a quiet minute and more, another burst: fish sleeps and wakes up.
        "fish": [2 if second < 10 or second >= 85 else 0 for second in range(seconds)],
    }
    records = zeitgeist.queries_per_second(counts, rng)
    arrivals = [record for batch in zeitgeist.micro_batches(records, rng) for record in batch]
    module, source, streams = live_zeitgeist_module(tmp_path, workspace)

    live, batch, in_memory = run_live_then_batch(
        spark, workspace, module, "Zeitgeist", source, streams, arrivals
    )

    expected_counts = zeitgeist.expected_counts(records)
    for run in (live, batch, in_memory):
        produced = Counter((v["query"], v["second"]) for v in run["counts_stream"])
        assert set(produced.values()) == {1}, "each second is produced once"
        counted = {(v["query"], v["second"]): v["count"] for v in run["counts_stream"]}
        assert counted == expected_counts
        anomalies = zeitgeist.by_query_and_second(run["anomalies_stream"])
        assert anomalies == zeitgeist.expected_anomalies(expected_counts)
        assert ("cats", zeitgeist.T0 + 70_000, "spike") in {
            (v["query"], v["second"], v["kind"]) for v in anomalies
        }
    assert same(live["counts_stream"]) == same(batch["counts_stream"])
    assert same(batch["counts_stream"]) == same(in_memory["counts_stream"])
    assert same(live["anomalies_stream"]) == same(batch["anomalies_stream"])


@pytest.mark.timeout(1800)
def test_sessions_live_killed_and_restarted_and_in_batch_match_plain_python(
    spark: SparkSession, workspace: Workspace, tmp_path: Path
) -> None:
    rng = random.Random(5)
    events = sessions.video_events(rng, sessions=40)
    arrivals = [event for batch in sessions.micro_batches(events, rng) for event in batch]
    module, source, streams = live_module(
        tmp_path,
        workspace,
        "sessions",
        "ActiveSessions",
        "session",
        "10s",
        {"changes_stream": "session-changes", "deltas_stream": "session-deltas"},
    )

    live, batch, in_memory = run_live_then_batch(
        spark, workspace, module, "ActiveSessions", source, streams, arrivals
    )

    expected = sessions.in_order(sessions.expected_changes(events))
    for run in (live, batch, in_memory):
        assert sessions.in_order(run["changes_stream"]) == expected
        deltas = Counter((v["session"], v["time"], v["delta"]) for v in run["deltas_stream"])
        assert deltas == Counter(
            (change["session"], change["time"], 1 if change["change"] == "started" else -1)
            for change in expected
        )
    for attribute in streams:
        assert same(live[attribute]) == same(batch[attribute]) == same(in_memory[attribute])
