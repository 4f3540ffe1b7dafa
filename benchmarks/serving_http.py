"""Serving-table point lookups over HTTP: latency of `millrace serve`, next to Redis itself.

Run it with `.venv/bin/python benchmarks/serving_http.py [--rows N] [--lookups L]
[--rounds R]` after `make setup`. It writes N rows into a serving table, starts
`millrace serve` on a free loopback port (as a user would, in its own process), and reads L
random keys one after the other, R rounds per side, interleaved, after a warm-up round:

- `http_point_lookup`: `GET /tables/{table}/{key}` over one kept-alive HTTP connection, the
  response's JSON decoded: what a product reading the table sees;
- `redis_get`: the baseline, `GET` of the same key straight from Redis with redis-py and the
  row's JSON decoded: the store's own round trip, with no service in between.

Every answer is checked against the row written (a mismatch stops the benchmark). Latencies
are per request, in milliseconds, from sending to the decoded answer; the result gives p50,
p99 and the mean of each side over all its rounds, and the ratio of the p50s. The result goes
to benchmarks/results/serving-http-*.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import time

import redis
from _harness import free_port, isolated_workspace, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with isolated_workspace():
        from millrace.config.workspace import Workspace
        from millrace.serving.tables import TableSpec, create_table, write_rows

        settings = Workspace.locate().settings
        spec = create_table(
            settings,
            TableSpec("bench_lookups", (("key", "STRING"),), (("topic", "STRING"),)),
        )
        rows = {f"k{n}": {"key": f"k{n}", "topic": f"t{n % 97}"} for n in range(options.rows)}
        write_rows(
            settings.redis,
            spec,
            {"key": list(rows), "topic": [row["topic"] for row in rows.values()]},
        )
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "millrace.cli.main", "serve", "--port", str(port)],
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            connection = _connect(port)
            store = redis.Redis.from_url(settings.redis)
            generator = random.Random(3)
            sides = {
                "http_point_lookup": lambda key: _http_get(connection, key),
                "redis_get": lambda key: json.loads(store.get(f"millrace:t:bench_lookups:{key}")),
            }
            latencies: dict[str, list[float]] = {side: [] for side in sides}
            for round_ in range(options.rounds + 1):
                keys = generator.sample(sorted(rows), options.lookups)
                for side, lookup in sides.items():
                    measured = _measure(lookup, keys, rows, side)
                    if round_:  # round 0 warms up
                        latencies[side].extend(measured)
        finally:
            server.terminate()
            server.wait(timeout=30)
    results: dict[str, object] = {"rows": options.rows, "lookups": options.lookups}
    for side, values in latencies.items():
        ranked = statistics.quantiles(values, n=100, method="inclusive")
        results[side] = {
            "median_ms": statistics.median(values),
            "p95_ms": ranked[94],
            "p99_ms": ranked[98],
            "mean_ms": statistics.fmean(values),
            "percentiles_ms": ranked,
        }
    results["p50_ratio_http_to_redis"] = (
        results["http_point_lookup"]["median_ms"] / results["redis_get"]["median_ms"]
    )
    write_results("serving-http", results)


def _measure(lookup, keys: list[str], rows: dict[str, dict], side: str) -> list[float]:
    measured = []
    for key in keys:
        started = time.perf_counter()
        row = lookup(key)
        measured.append((time.perf_counter() - started) * 1000)
        if row != rows[key]:
            raise SystemExit(f"{side}: key {key} gave {row}, not {rows[key]}")
    return measured


def _connect(port: int) -> http.client.HTTPConnection:
    """A connection to the service, once it answers (it starts in a few seconds)."""
    deadline = time.monotonic() + 60
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", "/streams")
            connection.getresponse().read()
            return connection
        except OSError:
            connection.close()
            if time.monotonic() > deadline:
                raise SystemExit("millrace serve did not answer within 60 s") from None
            time.sleep(0.5)


def _http_get(connection: http.client.HTTPConnection, key: str) -> dict:
    connection.request("GET", f"/tables/bench_lookups/{key}")
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"GET /tables/bench_lookups/{key}: {response.status} {body[:200]!r}")
    return json.loads(body)


if __name__ == "__main__":
    main()
