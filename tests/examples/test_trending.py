"""The trending-events pipeline (examples/trending/) end to end against plain Python.

A fixed input (seed, 3,000 records: out-of-order, late and malformed ones among them) goes
through the four apps in order on the real bus, Redis and Spark: the Filterer and the Joiner
as streaming SQL apps with an available-now trigger, the Scorer and the Ranker as batch runs
over the input's whole range of event times (every pane and window closes, and no record is
late, as in one micro-batch). The top 3 per topic and window is checked against the same
rules computed here in plain Python, and the malformed records against the dead letters.
"""

import importlib.util
import itertools
import math
import random
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from pyspark.sql import SparkSession

from millrace.api.app import create_app
from millrace.apps.processors.batch import run_processor_batch
from millrace.apps.sql.batch import run_sql_app_batch
from millrace.apps.sql.running import start_sql_app
from millrace.bus.reader import TailStart, tail
from millrace.config.workspace import Workspace
from millrace.engine.user_code import ship_with_tasks
from millrace.processor.loading import load_processor
from millrace.records import event_time_ms
from millrace.sql.parser import load_app
from millrace.testing import ProcessorTester
from millrace.warehouse.result_tables import read_result_rows

TRENDING = Path(__file__).resolve().parents[2] / "examples" / "trending"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds
PANE_MS = 10_000
KEPT_TYPES = {"post", "comment", "share"}


def _load(name: str):
    module_name = f"millrace_examples.trending_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, TRENDING / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


def _all(stream: str, settings) -> list:
    return list(tail(stream, TailStart(from_beginning=True), settings=settings))


def expected_top_events(records: list, dimensions: dict, k: int = 3) -> dict:
    """Plain Python: {(window start ms, topic): [(event, score), ...]} by the pipeline's rules."""
    panes: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for record in records:
        if isinstance(record, bytes) or record["event_type"] not in KEPT_TYPES:
            continue
        dimension = dimensions.get(record["dimension_id"])
        if dimension is None:
            continue
        pane = event_time_ms(record, "event_time") // PANE_MS * PANE_MS
        panes[(dimension["name"], dimension["topic"])][pane] += 1
    scores: dict[tuple[int, str], dict[str, float]] = defaultdict(dict)
    for (event, topic), counts in panes.items():
        trend, previous = 0.0, None
        for pane in sorted(counts):
            if previous is not None:
                trend *= 0.8 ** ((pane - previous) // PANE_MS - 1)
            last_30s = sum(counts.get(pane - back, 0) for back in (0, PANE_MS, 2 * PANE_MS))
            scores[(pane, topic)][event] = last_30s * (counts[pane] + 1) / (trend + 1)
            trend = 0.8 * trend + 0.2 * counts[pane]
            previous = pane
    return {
        key: sorted(by_event.items(), key=lambda item: (-item[1], item[0]))[:k]
        for key, by_event in scores.items()
    }


def test_the_trending_pipeline_ranks_what_plain_python_ranks(
    spark: SparkSession, workspace: Workspace, redis_url: str
) -> None:
    generator = _load("generator")
    scorer = load_processor(f"{TRENDING / 'scorer.py'}:Scorer")
    ship_with_tasks(sys.modules[scorer.__module__])
    settings = workspace.settings
    generator.setup(settings)
    records = generator.generate(seed=11, count=3000, start_ms=T0, rate=50)
    malformed = sum(isinstance(record, bytes) for record in records)
    events = [record for record in records if not isinstance(record, bytes)]
    times = [event_time_ms(record, "event_time") for record in events]
    latest = list(itertools.accumulate(times, max))
    late = sum(1 for t, seen in zip(times, latest, strict=True) if t < seen - 5_000)
    out_of_order = sum(1 for a, b in itertools.pairwise(times) if a > b)
    assert malformed == 6 and late > 10 and out_of_order > 100
    generator.publish(settings, records)

    filterer = start_sql_app(
        spark, workspace, load_app(TRENDING / "filterer.sql"), available_now=True
    )
    filterer.await_termination()
    assert filterer.dead_letters() == {"events": malformed}
    joiner = start_sql_app(spark, workspace, load_app(TRENDING / "joiner.sql"), available_now=True)
    joiner.await_termination()

    start = min(times) // PANE_MS * PANE_MS
    end = (max(times) // PANE_MS + 1) * PANE_MS
    run_processor_batch(spark, workspace, scorer, start_ms=start, end_ms=end)
    run_sql_app_batch(
        spark, workspace, load_app(TRENDING / "ranker.sql"), start_ms=start, end_ms=end
    )

    dimensions = generator.dimensions()
    filtered = _all("trending.filtered", settings)
    enriched = _all("trending.enriched", settings)
    kept = [e for e in events if e["event_type"] in KEPT_TYPES]
    assert len(filtered) == len(kept)
    assert all(r.key == r.value["dimension_id"] for r in filtered)
    assert len(enriched) == sum(1 for e in kept if e["dimension_id"] in dimensions)
    assert all(r.key == f"{r.value['event']}|{r.value['topic']}" for r in enriched)
    assert len(_all("trending.events.dlq", settings)) == malformed

    rows = read_result_rows(workspace, "trending_ranker", "top_events")
    got = {
        (int(row["window_start"].timestamp() * 1000), row["topic"]): [
            (entry["item"], entry["weight"]) for entry in row["top_events"]
        ]
        for row in rows
    }
    expected = expected_top_events(records, dimensions)
    assert set(got) == set(expected)
    assert len({window for window, _ in got}) >= 6
    for key, ranked in expected.items():
        assert [event for event, _ in got[key]] == [event for event, _ in ranked], key
        for (_, weight), (_, score) in zip(got[key], ranked, strict=True):
            assert math.isclose(weight, score, rel_tol=1e-5), key
    assert isinstance(rows[0]["window_start"], datetime)

    # The same rows over HTTP, from the Delta files, filtered by topic, from the last 2 windows.
    client = TestClient(create_app(workspace))
    served = client.get(
        "/apps/trending_ranker/tables/top_events", params={"topic": "news", "last": 2}
    )
    assert served.status_code == 200
    windows = sorted({key[0] for key in got if key[1] == "news"})[-2:]
    assert [
        (row["window_start"], [entry["item"] for entry in row["top_events"]])
        for row in served.json()
    ] == [
        (
            datetime.fromtimestamp(w / 1000, UTC).isoformat().replace("+00:00", "Z"),
            [e for e, _ in got[(w, "news")]],
        )
        for w in windows
    ]
    assert client.get("/apps/trending_ranker/tables/top_events?colour=red").status_code == 400
    assert client.get("/apps/trending_ranker/tables/none").status_code == 404


def test_the_scorer_in_memory_scores_panes_as_plain_python_does() -> None:
    # Two keys, panes with gaps (the trend decays over panes without records), fed in
    # micro-batches of 10 s of event time, out of order within each batch.
    scorer = load_processor(f"{TRENDING / 'scorer.py'}:Scorer")
    rng = random.Random(5)
    counts = {
        ("#oscars", "movies"): [3, 0, 7, 1, 0, 0, 9, 2],
        ("#eclipse", "news"): [1, 4, 4, 0, 2],
    }
    tester = ProcessorTester(scorer)
    for pane in range(8):
        batch = [
            {
                "event": event,
                "topic": topic,
                "event_time": T0 + pane * PANE_MS + rng.randrange(PANE_MS),
            }
            for (event, topic), per_pane in counts.items()
            if pane < len(per_pane)
            for _ in range(per_pane[pane])
        ]
        rng.shuffle(batch)
        tester.feed("trending.enriched", batch)
        tester.run_batch()
    tester.advance_watermark(T0 + 9 * PANE_MS)
    tester.fire_timers()
    got = {
        (
            event_time_ms(value, "event_time") // PANE_MS * PANE_MS,
            value["topic"],
            value["event"],
        ): value["score"]
        for value in tester.values("trending.scores")
    }
    records = [
        {"event_type": "post", "dimension_id": event, "event_time": T0 + pane * PANE_MS}
        for (event, _), per_pane in counts.items()
        for pane, count in enumerate(per_pane)
        for _ in range(count)
    ]
    dimensions = {event: {"name": event, "topic": topic} for event, topic in counts}
    expected = {
        (pane, topic, event): score
        for (pane, topic), ranked in expected_top_events(records, dimensions, k=10).items()
        for event, score in ranked
    }
    assert got.keys() == expected.keys()
    for key, score in expected.items():
        assert math.isclose(got[key], score, rel_tol=1e-5), key
    assert not tester.late
