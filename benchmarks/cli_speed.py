"""How fast the `millrace` verbs that need no Spark answer, next to starting Python itself.

Run it with `.venv/bin/python benchmarks/cli_speed.py [--runs N]` after `make setup`. It uses
its own workspace on free loopback ports (broker and Redis up, one stream with a few records),
and times each verb as a user runs it, a new Python process from start to exit, interleaved
with `python -c pass` so that both see the same machine. It reports each verb's median wall
time in seconds and as a ratio to `python -c pass`. With PYTHONPATH pointing at another
checkout's `src/`, it times that checkout's CLI.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import cli, isolated_workspace, write_results

STREAM = "bench.cli"
EVENT = '{"time": "2026-01-01T00:00:00Z", "page": "/"}\n'
VERBS: dict[str, list[str]] = {
    "help": ["--help"],
    "status": ["status"],
    "stream_list": ["stream", "list"],
    "stream_describe": ["stream", "describe", STREAM],
    "tail": ["tail", STREAM, "--lines", "5"],
    "publish": ["publish", STREAM],
    "ps": ["ps"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="Runs of each verb (median taken).")
    runs = parser.parse_args().runs
    with isolated_workspace():
        cli("stream", "create", STREAM)
        cli("publish", STREAM, stdin=EVENT * 5)
        seconds: dict[str, list[float]] = {name: [] for name in ["python_pass", *VERBS]}
        for _ in range(runs):
            seconds["python_pass"].append(_wall_s(["-c", "pass"]))
            for name, arguments in VERBS.items():
                seconds[name].append(_wall_s(["-m", "millrace.cli.main", *arguments]))
    python_s = statistics.median(seconds["python_pass"])
    results: dict[str, object] = {
        "millrace_from": _millrace_source(),
        "runs": runs,
        "python_pass_median_s": python_s,
    }
    for name in VERBS:
        median = statistics.median(seconds[name])
        results[name] = {
            "wall_s": seconds[name],
            "median_wall_s": median,
            "ratio_to_python_pass": median / python_s,
        }
    write_results("cli-speed", results)


def _wall_s(arguments: list[str]) -> float:
    """Seconds from starting `python ARGUMENTS` to its exit; stdin holds one event."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, *arguments],
        input=EVENT,
        text=True,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def _millrace_source() -> str:
    """The folder the timed CLI was imported from: this checkout's, or PYTHONPATH's."""
    import millrace

    return str(Path(millrace.__file__).parent)


if __name__ == "__main__":
    main()
