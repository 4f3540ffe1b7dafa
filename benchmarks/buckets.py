"""What an input's bucket count costs: the same records and app drained on 2, 16 and 64 buckets.

Run it with `.venv/bin/python benchmarks/buckets.py [--records N] [--buckets B ...]
[--rounds R]` after `make setup`. It starts a workspace of its own and, for each bucket count
B, a stream of B buckets holding the same N records (event times 2,000 a second, eight
categories, one bucket after the other in turn), closed by a record far ahead in each bucket.
Each round then drains every stream, one after the other, with the same SQL app (a 10-second
window count per category, `LATENESS '5 seconds'`, mode `final`) run as a user runs it:
`millrace run app.sql --available-now`, a fresh driver each time. A run's result must equal
the count plain Python makes of the same records, or the benchmark fails.

For each bucket count it reports the median wall seconds of the runs (driver start included,
as a user waits for it) and the micro-batches a run took (`millrace history --json`), and
the ratio of each count's median to the smallest count's, measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from _harness import cli, cli_json, isolated_workspace, produce, write_results
from confluent_kafka import Producer

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
EVENTS_PER_S = 2_000
WINDOW_MS = 10_000
CATEGORIES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="Records in each stream.")
    parser.add_argument("--buckets", type=int, nargs="+", default=[2, 16, 64])
    parser.add_argument("--rounds", type=int, default=2, help="Drains of each stream.")
    arguments = parser.parse_args()
    counts = sorted(arguments.buckets)
    expected = _expected_counts(arguments.records)
    walls: dict[int, list[float]] = {count: [] for count in counts}
    batches: dict[int, list[int]] = {count: [] for count in counts}
    with isolated_workspace(), tempfile.TemporaryDirectory(prefix="millrace-buckets-") as scratch:
        for count in counts:
            _load(f"buckets.b{count}", count, arguments.records)
        for number in range(arguments.rounds):
            for count in counts:
                app = f"drain_b{count}_{number}"
                source = Path(scratch) / f"{app}.sql"
                source.write_text(_app_sql(app, f"buckets.b{count}"))
                started = time.monotonic()
                cli("run", str(source), "--available-now")
                walls[count].append(time.monotonic() - started)
                batches[count].append(len(cli_json("history", app)))
                if _result_counts(app) != expected:
                    raise SystemExit(f"{app}: the result differs from plain Python's count")
    smallest = statistics.median(walls[counts[0]])
    results: dict[str, object] = {
        "records": arguments.records,
        "rounds": arguments.rounds,
        "drain": {
            f"buckets_{count}": {
                "wall_s": walls[count],
                "median_wall_s": statistics.median(walls[count]),
                "micro_batches": batches[count],
                f"ratio_to_{counts[0]}_buckets": statistics.median(walls[count]) / smallest,
            }
            for count in counts
        },
    }
    write_results("buckets", results)


def _event(number: int) -> dict[str, object]:
    return {"ts": START_MS + number * 1000 // EVENTS_PER_S, "category": f"c{number % CATEGORIES}"}


def _expected_counts(records: int) -> Counter[tuple[int, str]]:
    """Plain Python's count of each (window start, category) of the records."""
    return Counter(
        (int(event["ts"]) // WINDOW_MS * WINDOW_MS, str(event["category"]))
        for event in map(_event, range(records))
    )


def _load(stream: str, buckets: int, records: int) -> None:
    from millrace.bus.streams import create_stream
    from millrace.config.workspace import Workspace

    settings = Workspace.locate().settings
    create_stream(settings, stream, buckets=buckets)
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "linger.ms": 20,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )
    for number in range(records):
        produce(
            producer, stream, json.dumps(_event(number)).encode(), f"b:{number}", number % buckets
        )
    # Far enough ahead that the watermark closes every window of the records.
    closing = json.dumps(
        {"ts": START_MS + records * 1000 // EVENTS_PER_S + 60_000, "category": "closing"}
    )
    for bucket in range(buckets):
        produce(producer, stream, closing.encode(), f"closing:{bucket}", bucket)
    producer.flush()


def _app_sql(app: str, stream: str) -> str:
    return f"""
        CREATE APPLICATION {app};
        CREATE INPUT TABLE events (ts TIMESTAMP, category STRING)
          FROM STREAM('{stream}') TIME ts LATENESS '5 seconds';
        CREATE TABLE per_category AS
        SELECT category, COUNT(*) AS n FROM events [10 seconds] GROUP BY category;
        """


def _result_counts(app: str) -> Counter[tuple[int, str]]:
    from millrace.config.workspace import Workspace
    from millrace.warehouse.result_tables import read_result_rows

    rows = read_result_rows(Workspace.locate(), app, "per_category")
    return Counter(
        {
            (int(row["window_start"].timestamp() * 1000), row["category"]): row["n"]
            for row in rows
            if row["category"] != "closing"
        }
    )


if __name__ == "__main__":
    main()
