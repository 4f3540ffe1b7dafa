"""Where a micro-batch's time goes: the Yahoo app and query at fixed input rates.

Run it with `.venv/bin/python benchmarks/batch_costs.py [--rate R ...] [--seconds S]` after
`make setup`. Each side reads a fresh stream while a publisher process writes R ad events a
second to it for S seconds (benchmarks/yahoo.py's events and query), one side and one rate
after the other, after a short probe of each side that warms the JVM up and is not kept:

- `millrace`: the Yahoo SQL app with its default semantics, `exactly_once`, which drops copies
  of its input records by id (a shuffle by id and a state store row per id);
- `millrace_at_least_once`: the same app with `semantics = 'at_least_once'`;
- `handwritten_pyspark`: the same query hand-written in PySpark.

A running query's micro-batch gathers what arrived while the previous one ran. For the
micro-batches that had input, the result gives, per side and rate, the median rows per batch,
the median cycle (`median_cycle_ms`, Spark's `triggerExecution`: the whole batch) and the
median of each of Spark's phases (`durationMs`: `addBatch` runs the batch's jobs,
`queryPlanning` plans them, `walCommit` and `commitOffsets` write the offset and commit logs),
and of each stateful operator's state-store times (`median_state_ms`).
A cycle that stays the same while the rows double is a fixed cost per batch; one that grows
with them is a cost per row. A side keeps up while its cycle stays short of the time in which
its input gathers (benchmarks/yahoo.py `--sustained` finds the rate where it no longer does).
The result goes to benchmarks/results/batch-costs-*.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import yahoo
from _harness import isolated_workspace, write_results
from _load import publish_at_rate
from _sides import at_least_once, millrace_app
from pyspark.sql.streaming import StreamingQuery

SIDES = ("millrace", "millrace_at_least_once", "handwritten_pyspark")
_WARM_UP_S = 15
_FIRST_BATCH_TIMEOUT_S = 180


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, action="append", dest="rates")
    parser.add_argument("--seconds", type=float, default=45)
    options = parser.parse_args()
    rates = sorted(options.rates or [4_000, 8_000])
    with isolated_workspace():
        from millrace.bus.streams import create_stream
        from millrace.config.workspace import Workspace
        from millrace.engine.session import spark_session, stop_spark_session

        workspace = Workspace.locate()
        yahoo._serve_campaigns(workspace)
        spark = spark_session(workspace.settings, app_name="millrace-bench-batch-costs")
        campaigns = spark.createDataFrame(
            yahoo._campaign_rows(), "ad_id STRING, campaign_id STRING"
        )

        def start(side: str, stream: str) -> tuple[list[StreamingQuery], Callable[[], None]]:
            if side == "handwritten_pyspark":
                query = yahoo._handwritten(spark, workspace, stream, campaigns, available_now=False)
                return [query], query.stop
            app = yahoo._app(workspace, stream)
            if side == "millrace_at_least_once":
                app = at_least_once(app)
            running = millrace_app(spark, workspace, app, available_now=False)
            return running.queries, running.stop

        def probe(side: str, rate: int, seconds: float) -> dict[str, object]:
            stream = f"bench.costs.{side}.{rate}.{time.monotonic_ns()}"
            create_stream(workspace.settings, stream, buckets=2)
            queries, stop = start(side, stream)
            publisher = publish_at_rate(
                workspace.settings.bootstrap_servers, stream, rate, seconds, yahoo.live_payloads
            )
            publisher.join()
            time.sleep(3)  # the batch under way when the publisher ends
            # On a loaded machine a query's first micro-batch, which starts its operators,
            # can outlast a short probe: wait for it rather than find no batch with input.
            _await_input_batch(queries, _FIRST_BATCH_TIMEOUT_S)
            costs = _batch_costs(queries)
            stop()
            return costs

        results: dict[str, object] = {"rates": rates, "seconds": options.seconds}
        try:
            # A first probe warms the JVM's code up for every side, and is not kept.
            for side in SIDES:
                probe(side, rates[0], _WARM_UP_S)
            for side in SIDES:
                results[side] = {str(rate): probe(side, rate, options.seconds) for rate in rates}
        finally:
            stop_spark_session()
    write_results("batch-costs", results)


def _await_input_batch(queries: list[StreamingQuery], timeout_s: float) -> None:
    """Wait until a query has finished a micro-batch with input, or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not any(
        progress["numInputRows"] > 0 for query in queries for progress in query.recentProgress
    ):
        time.sleep(1)


def _batch_costs(queries: list[StreamingQuery]) -> dict[str, object]:
    """Medians over the micro-batches with input of every query: rows and phase durations."""
    batches = [
        progress
        for query in queries
        for progress in query.recentProgress
        if progress["numInputRows"] > 0
    ]
    if not batches:
        raise SystemExit("no micro-batch had input: is the publisher reaching the broker?")
    phases = sorted({phase for batch in batches for phase in batch["durationMs"]})
    return {
        "batches": len(batches),
        "median_rows": statistics.median(batch["numInputRows"] for batch in batches),
        "median_cycle_ms": statistics.median(
            batch["durationMs"]["triggerExecution"] for batch in batches
        ),
        "median_phase_ms": {
            phase: statistics.median(batch["durationMs"].get(phase, 0) for batch in batches)
            for phase in phases
        },
        "median_state_ms": _state_costs(batches),
    }


def _state_costs(batches: list[dict]) -> dict[str, dict[str, float]]:
    """Per stateful operator (`<index>:<name>`), the median of its times in a micro-batch.

    Spark sums each time over the operator's partitions: `commitTimeMs` writes the state
    store's new version, `allUpdatesTimeMs` reads and writes rows, `allRemovalsTimeMs` drops
    the rows the watermark has passed.
    """
    times: dict[str, dict[str, list[float]]] = {}
    for batch in batches:
        for index, operator in enumerate(batch["stateOperators"]):
            kept = times.setdefault(f"{index}:{operator['operatorName']}", {})
            for name in ("commitTimeMs", "allUpdatesTimeMs", "allRemovalsTimeMs"):
                kept.setdefault(name, []).append(operator.get(name, 0))
    return {
        operator: {name: statistics.median(values) for name, values in kept.items()}
        for operator, kept in times.items()
    }


if __name__ == "__main__":
    main()
