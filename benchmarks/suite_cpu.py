"""Whether the test suite's time is bound by the machine's cores: the suite with more workers.

Run it with `.venv/bin/python benchmarks/suite_cpu.py [--workers 2 3]` after `make setup`,
on a machine doing nothing else: each run is the whole suite (about 20 minutes here). For
each worker count it runs `make test`'s pytest line with that many workers (pytest-xdist, a
file to a worker, the slowest first) and reads /proc/stat every second while it runs. It
reports each run's wall seconds, whether it passed, the CPU seconds the machine spent busy
(user, system, interrupts, nice) and idle (idle, iowait), and the busy share of the cores.

The first count is the baseline: `make test` runs 2 workers. A suite that waits (on sleeps,
timers, a broker's answers) leaves cores idle, which more workers would fill: its time falls
with them. A suite whose cores are busy all along takes as long with more workers, and
only less CPU work makes it faster.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from _harness import machine_cpu_seconds, write_results

ROOT = Path(__file__).resolve().parents[1]
_SAMPLE_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[2, 3], help="Worker counts, baseline first."
    )
    arguments = parser.parse_args()
    runs = {str(workers): _run_suite(workers) for workers in arguments.workers}
    baseline = runs[str(arguments.workers[0])]
    results: dict[str, object] = {"cores": os.cpu_count(), "runs": runs}
    for workers, run in list(runs.items())[1:]:
        results[f"wall_s_ratio_{workers}_to_{arguments.workers[0]}"] = (
            run["wall_s"] / baseline["wall_s"]
        )
    write_results("suite-cpu", results)


def _run_suite(workers: int) -> dict[str, float | bool]:
    """One run of the suite with `workers` workers: its wall seconds and the machine's CPU."""
    command = [
        sys.executable, "-m", "pytest", "--numprocesses", str(workers), "--dist", "loadfile",
        "--no-loadscope-reorder", "-p", "no:cacheprovider", "-q",
    ]  # fmt: skip
    done = threading.Event()
    samples: list[tuple[float, float]] = []
    sampler = threading.Thread(target=_sample, args=(done, samples), daemon=True)
    started = time.monotonic()
    sampler.start()
    try:
        finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    finally:
        done.set()
        sampler.join()
    wall_s = time.monotonic() - started
    print(finished.stdout.splitlines()[-1] if finished.stdout else finished.stderr[-2000:])
    busy_s = samples[-1][0] - samples[0][0]
    idle_s = samples[-1][1] - samples[0][1]
    return {
        "passed": finished.returncode == 0,
        "wall_s": wall_s,
        "busy_cpu_s": busy_s,
        "idle_cpu_s": idle_s,
        "busy_share": busy_s / (busy_s + idle_s),
    }


def _sample(done: threading.Event, samples: list[tuple[float, float]]) -> None:
    """Append the machine's busy and idle CPU seconds so far, every second until `done`."""
    while True:
        samples.append(machine_cpu_seconds())
        if done.wait(_SAMPLE_S):
            samples.append(machine_cpu_seconds())
            return


if __name__ == "__main__":
    main()
