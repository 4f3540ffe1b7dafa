"""Watermarks travel with the data (millrace.engine.output_watermark, read back through
millrace.engine.low_watermark): an app's readers follow its markers, so a derived input needs
no lateness for its writer's micro-batches, and a quiet source closes every stage's windows."""

# Processor classes declare `inputs` as a list, the way users write them.
# ruff: noqa: RUF012

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter, defaultdict

from pyspark.sql import SparkSession

from millrace import Input, MapState, Processor
from millrace.apps.processors.placement import Placement
from millrace.apps.processors.streaming import start_processor_app
from millrace.apps.sql.running import start_sql_app
from millrace.bus.reader import TailStart, tail
from millrace.bus.streams import create_stream
from millrace.config.workspace import Workspace
from millrace.errors import ResultTableNotFoundError
from millrace.sql.parser import parse_app
from millrace.warehouse.result_tables import read_result_rows
from tests.plain_producer import plain_producer

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WINDOW_MS = 10_000
SECONDS = 60
PAGES = ["home", "cart", "search", "help", "blog"]


def clicks() -> list[dict]:
    """A minute of clicks on four buckets, each bucket out of order by up to 2 seconds."""
    generator = random.Random(25)
    events = []
    for n in range(SECONDS * 40):
        events.append(
            {
                "ts": T0 + n * 25 + generator.randint(-2000, 2000),
                "user": f"u{n % 7}",
                "page": generator.choice(PAGES[: 2 + n % 4]),
                "keep": n % 5 != 0,
            }
        )
    return events


def expected_top(events: list[dict]) -> dict[int, list[tuple[str, float]]]:
    """Plain Python: per 10-second window, the two pages most clicked among those kept."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for event in events:
        if event["keep"]:
            counts[event["ts"] // WINDOW_MS * WINDOW_MS][event["page"]] += 1
    return {
        window: sorted(
            ((page, float(n)) for page, n in pages.items()), key=lambda p: (-p[1], p[0])
        )[:2]
        for window, pages in counts.items()
    }


def window_counter(source: str, output: str) -> type[Processor]:
    """Counts a page's clicks per 10 seconds of event time, produced when the window closes."""

    class WindowCounter(Processor):
        name = f"counter_{uuid.uuid4().hex[:8]}"
        inputs = [Input(source, key="page", time="ts", lateness="0s", idle_timeout="2s")]
        counts = MapState(key=int, value=int)

        def on_record(self, key, record, ctx):
            window = ctx.event_time_ms // WINDOW_MS * WINDOW_MS
            self.counts[window] = self.counts.get(window, 0) + 1
            ctx.set_timer(f"close-{window}", event_time_ms=window + WINDOW_MS)

        def on_timer(self, key, timer, ctx):
            window = timer.time_ms - WINDOW_MS
            count = self.counts.pop(window, 0)
            ctx.produce(output, {"page": key, "n": count}, key=key, time_ms=timer.time_ms - 1)

    return WindowCounter


def publish(workspace: Workspace, stream: str, events: list[dict]) -> None:
    producer = plain_producer(workspace.settings)
    for n, event in enumerate(events):
        producer.produce(stream, json.dumps(event), partition=n % 4)
    producer.flush()


def test_a_chain_without_lateness_downstream_equals_python_and_a_quiet_source_closes_it(
    spark: SparkSession, workspace: Workspace
) -> None:
    tag = uuid.uuid4().hex[:8]
    source, kept, counted = f"clicks_{tag}", f"kept_{tag}", f"counts_{tag}"
    for stream in (source, kept, counted):
        create_stream(workspace.settings, stream, buckets=4)
    events = clicks()
    publish(workspace, source, events)
    published_at = time.monotonic()
    keep = parse_app(
        f"""
        CREATE APPLICATION keep_{tag};
        CREATE INPUT TABLE clicks (ts TIMESTAMP, user STRING, page STRING, keep BOOLEAN)
          FROM STREAM('{source}') TIME ts LATENESS '5 seconds' IDLE TIMEOUT '2 seconds';
        INSERT INTO STREAM('{kept}') SELECT ts, user, page FROM clicks WHERE keep;
        """
    )
    top = parse_app(
        f"""
        CREATE APPLICATION top_{tag};
        CREATE INPUT TABLE counts (ts TIMESTAMP, page STRING, n BIGINT)
          FROM STREAM('{counted}') TIME ts LATENESS '0 seconds' IDLE TIMEOUT '2 seconds';
        CREATE TABLE top_pages AS SELECT TOPK(page, n, 2) AS top FROM counts [10 seconds];
        """
    )
    first = start_sql_app(spark, workspace, keep, max_records_per_batch=600)
    counter = start_processor_app(
        spark,
        workspace,
        window_counter(kept, counted),
        max_records_per_batch=400,
        placement=Placement(8),
    )
    last = start_sql_app(spark, workspace, top)
    expected = expected_top(events)
    try:
        found: dict[int, list[tuple[str, float]]] = {}
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and len(found) < len(expected):
            time.sleep(2)
            # Read outside Spark: a Spark read every 2 s would compete with the three apps.
            try:
                rows = read_result_rows(workspace, top.name, "top_pages")
            except ResultTableNotFoundError:
                continue
            found = {
                int(row["window_start"].timestamp() * 1000): [
                    (item["item"], item["weight"]) for item in row["top"]
                ]
                for row in rows
            }
        closed_after_s = time.monotonic() - published_at
        assert found == expected, f"after {closed_after_s:.0f} s"
        assert counter.late == 0
        assert sum(last.late_rows().values()) == 0
        productions = list(
            tail(counted, TailStart(from_beginning=True), settings=workspace.settings)
        )
        assert productions, "the processor's productions are on the bus"
        assert all(record.time_ms % WINDOW_MS == WINDOW_MS - 1 for record in productions), (
            "each production keeps its own event time, its window's last millisecond"
        )
    finally:
        for app in (first, counter, last):
            app.stop()
