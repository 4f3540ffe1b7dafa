"""Kill -9 to the first new micro-batch: how long a stateful stage is down when its driver dies.

Run it with `.venv/bin/python benchmarks/restart.py [--rounds R] [--rate N] [--only SIDE ...]
[--notes TEXT]` after `make setup`. Each side runs as a user runs an app: a process group of
its own (Python and Spark's JVM, on this machine's Spark), reading a stream of its own:

- `millrace_processor`: a millrace `Processor` counting records per key in a `ValueState`
  (per-record Python, `exactly_once`, the default), in an app file started with
  `millrace run FILE:Counter`;
- `handwritten_pyspark`: the same count written against PySpark's `transformWithState`
  (`processors.direct_counts`), in this script started with `--handwritten`: the baseline,
  what restarting a Spark application costs anyway.

Each round, for each side in turn: a publisher feeds the side's stream at N records a second
(default 2,000, over 1,000 keys); the side starts (from its checkpoint after the first round)
and runs until it has committed `STEADY_BATCHES` more micro-batches; then, at a random moment
of a micro-batch, its whole process group is killed with SIGKILL and started again at once.
The round's figure is the time from the kill to the next micro-batch its checkpoint records as
committed (polled every 50 ms): starting Python and the JVM, the SparkSession, planning,
restoring state, and running the micro-batch the kill interrupted with the input that came
meanwhile. The restarted side is then killed too (not measured) and its publisher stopped, so
that one side runs at a time.

After the rounds each side's answer is checked, so that a fast restart cannot come from
losing input: a closing record dated now (the others are dated a day back) goes to every
bucket of its stream, the side runs to the end of its input (`--available-now`), and the
counts it emits, once the watermark passes their timer, must equal a plain-Python count of
the records its stream holds (a mismatch stops the benchmark with SystemExit).

The result goes to benchmarks/results/restart-*.json: each side's restart seconds per round
and their median, and `millrace_processor_to_handwritten_ratio`, the ratio of the medians
(below 1: millrace restarts faster than the hand-written query).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _harness import isolated_workspace, write_results
from _load import publish_at_rate
from confluent_kafka import Consumer, Producer, TopicPartition

SIDES = ("millrace_processor", "handwritten_pyspark")
KEYS = 1_000
BUCKETS = 2
STEADY_BATCHES = 3
"""Micro-batches a side commits after its first before it is killed: it runs as it would."""
LATENESS_MS = 1_000
_DATED_BACK_MS = 86_400_000
"""Records are dated this long before they are published, and each key's count is emitted on
a timer at the benchmark's start: no round's watermark reaches it, only the closing record's,
dated when it is published (millrace dead-letters a record dated far ahead of the clock)."""
_KILL_SPREAD_S = 2.0
_POLL_S = 0.05
_COMMIT_TIMEOUT_S = 300.0
_PUBLISH_S = 3_600.0
"""Longer than any round: a side's publisher is stopped when its round ends."""

_APP = '''"""The stage benchmarks/restart.py kills: a count per key, emitted at the end."""

from millrace import Input, Processor, ValueState


class Counter(Processor):
    name = "restart_counter"
    inputs = [Input({stream!r}, key="key", time="time", lateness="{lateness_ms}ms")]
    count = ValueState(int)

    def on_record(self, key, record, ctx):
        if not self.count.exists():
            ctx.set_timer("emit", event_time_ms={emit_ms})
        self.count.set(self.count.get(0) + 1)

    def on_timer(self, key, timer, ctx):
        ctx.produce({output!r}, {{"key": key, "count": self.count.get()}})
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--only", action="append", choices=SIDES, metavar="SIDE")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--notes", help="what to know about this run, kept in the result")
    parser.add_argument("--handwritten", nargs=4, metavar=("STREAM", "OUTPUT", "CKPT", "EMIT"))
    parser.add_argument("--available-now", action="store_true")
    options = parser.parse_args()
    if options.handwritten:
        _run_handwritten(*options.handwritten, available_now=options.available_now)
        return
    generator = random.Random(options.seed)
    results: dict[str, object] = {
        "rounds": options.rounds,
        "rate": options.rate,
        "keys": KEYS,
        "steady_batches": STEADY_BATCHES,
    }
    if options.notes:
        results["notes"] = options.notes
    with isolated_workspace() as home:
        sides = [_side(home, name) for name in SIDES if not options.only or name in options.only]
        try:
            for round_number in range(options.rounds):
                for side in sides:
                    seconds = _round(side, options.rate, round_number, generator)
                    side.restarts_s.append(seconds)
                    print(f"{side.name} round {round_number}: {seconds:.2f} s", flush=True)
            for side in sides:
                _check(side)
        finally:
            for side in sides:
                side.kill()
    medians = {side.name: statistics.median(side.restarts_s) for side in sides}
    for side in sides:
        results[side.name] = {
            "restart_s": side.restarts_s,
            "median_restart_s": medians[side.name],
            "records_checked": side.records_checked,
        }
    if len(medians) == len(SIDES):
        ratio = medians["millrace_processor"] / medians["handwritten_pyspark"]
        results["millrace_processor_to_handwritten_ratio"] = ratio
    write_results("restart", results)


@dataclass
class _Side:
    """One side: how to start it, the checkpoint whose commits show its progress, its streams."""

    name: str
    command: list[str]
    checkpoint: Path
    stream: str
    output: str
    bootstrap: str
    """The bus's address, for the publisher and the check."""
    log: Path
    process: subprocess.Popen | None = None
    restarts_s: list[float] = field(default_factory=list)
    records_checked: int = 0

    def start(self, *arguments: str) -> None:
        """Start the side in a process group of its own, its output appended to its log."""
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [*self.command, *arguments],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL the side's whole process group and wait until none of it is left."""
        if self.process is None or self.process.poll() is not None:
            return
        group = self.process.pid
        os.killpg(group, signal.SIGKILL)
        self.process.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(_POLL_S)
        raise SystemExit(f"{self.name}: processes of group {group} outlived SIGKILL for 30 s")

    def last_commit(self) -> int:
        """The highest micro-batch the checkpoint records as committed; -1 before the first."""
        commits = self.checkpoint / "commits"
        numbers = (
            [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
        )
        return max(numbers, default=-1)

    def wait_for_commit(self, beyond: int) -> int:
        """Wait until a micro-batch after `beyond` is committed; its number."""
        deadline = time.monotonic() + _COMMIT_TIMEOUT_S
        while (last := self.last_commit()) <= beyond:
            if self.process is not None and self.process.poll() is not None:
                raise SystemExit(
                    f"{self.name} stopped ({self.process.returncode}):\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name} committed nothing in {_COMMIT_TIMEOUT_S:.0f} s")
            time.sleep(_POLL_S)
        return last

    def _tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def _side(home: Path, name: str) -> _Side:
    """Create the side's streams and app, and say how to start it."""
    from millrace.bus.streams import create_stream
    from millrace.config.workspace import Workspace

    workspace = Workspace.locate()
    run = uuid.uuid4().hex[:8]
    stream, output = f"bench.restart.{run}", f"bench.restart.{run}.out"
    create_stream(workspace.settings, stream, buckets=BUCKETS)
    create_stream(workspace.settings, output, buckets=BUCKETS)
    emit_ms = int(time.time() * 1000)
    log = home / f"{name}.log"
    if name == "millrace_processor":
        app = home / "restart_counter.py"
        app.write_text(
            _APP.format(stream=stream, output=output, emit_ms=emit_ms, lateness_ms=LATENESS_MS)
        )
        command = [sys.executable, "-m", "millrace.cli.main", "run", f"{app}:Counter"]
        checkpoint = workspace.checkpoint("restart_counter", "processor")
    else:
        checkpoint = workspace.checkpoint("bench", f"restart-{run}")
        script = str(Path(__file__).resolve())
        arguments = [stream, output, str(checkpoint), str(emit_ms)]
        command = [sys.executable, script, "--handwritten", *arguments]
    bootstrap = workspace.settings.bootstrap_servers
    return _Side(name, command, checkpoint, stream, output, bootstrap, log)


def _round(side: _Side, rate: int, round_number: int, generator: random.Random) -> float:
    """Start the side under load, kill it once it runs steadily, restart it: seconds down."""
    ids = f"{side.name}:{round_number}"  # each round's publisher numbers its records from 0
    publisher = publish_at_rate(
        side.bootstrap, side.stream, rate, _PUBLISH_S, keyed_records, ids=ids
    )
    try:
        side.start()
        first = side.wait_for_commit(side.last_commit())
        side.wait_for_commit(first + STEADY_BATCHES - 1)
        time.sleep(generator.uniform(0, _KILL_SPREAD_S))
        killed = time.monotonic()
        side.kill()
        before = side.last_commit()
        side.start()
        side.wait_for_commit(before)
        down_s = time.monotonic() - killed
        side.kill()
    finally:
        publisher.kill()
        publisher.join()
    return down_s


def keyed_records(first: int, count: int) -> list[bytes]:
    """`count` records over `KEYS` keys dated `_DATED_BACK_MS` ago, for the publisher."""
    now_ms = int(time.time() * 1000) - _DATED_BACK_MS
    numbers = range(first, first + count)
    return [f'{{"time":{now_ms},"key":"k{n % KEYS}"}}'.encode() for n in numbers]


def _check(side: _Side) -> None:
    """Run the side to the end of its input and compare its counts with the stream's records."""
    bootstrap = side.bootstrap
    closing_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": bootstrap})
    for bucket in range(BUCKETS):
        closing = json.dumps({"time": closing_ms, "key": "closing"}).encode()
        producer.produce(side.stream, closing, partition=bucket, headers={"id": f"close:{bucket}"})
    producer.flush(30)
    side.start("--available-now")
    if side.process is None or side.process.wait(timeout=_COMMIT_TIMEOUT_S) != 0:
        raise SystemExit(f"{side.name} did not run to the end of its input:\n{side._tail()}")
    expected = Counter(json.loads(value)["key"] for value in _read_all(bootstrap, side.stream))
    emitted: Counter = Counter()
    for value in _read_all(bootstrap, side.output):
        if value:  # an empty value is a watermark marker (`millrace.bus.markers`)
            count = json.loads(value)
            if count["key"] in emitted:
                raise SystemExit(f"{side.name} emitted key {count['key']!r} twice")
            emitted[count["key"]] = count["count"]
    if emitted != expected:
        wrong = {k for k in expected.keys() | emitted.keys() if expected[k] != emitted[k]}
        raise SystemExit(
            f"{side.name} counted {emitted.total()} records for {expected.total()} published; "
            f"{len(wrong)} keys differ, such as {sorted(wrong)[:5]}; its log ends:\n{side._tail()}"
        )
    side.records_checked = expected.total()


def _read_all(bootstrap: str, stream: str) -> list[bytes]:
    """Every record value `stream` holds now."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"restart-{uuid.uuid4().hex[:8]}"}
    )
    try:
        ends = {
            bucket: consumer.get_watermark_offsets(TopicPartition(stream, bucket), timeout=10)[1]
            for bucket in range(BUCKETS)
        }
        consumer.assign([TopicPartition(stream, bucket, 0) for bucket in range(BUCKETS)])
        values: list[bytes] = []
        read = dict.fromkeys(ends, 0)
        while any(read[bucket] < ends[bucket] for bucket in ends):
            for message in consumer.consume(10_000, timeout=1):
                if message.error():
                    continue
                read[message.partition()] = message.offset() + 1
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


def _run_handwritten(
    stream: str, output: str, checkpoint: str, emit_ms: str, *, available_now: bool
) -> None:
    """The baseline's driver: the count on `transformWithState`, Kafka to Kafka, run until
    killed (or to the end of its input with `available_now`)."""
    from processors import direct_counts

    from millrace.config.workspace import Workspace
    from millrace.engine.session import spark_session, state_store

    # Spark's Python workers unpickle `DirectCounter` by its module: they need this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")])
    )
    settings = Workspace.locate().settings
    spark = spark_session(settings, app_name="millrace-bench-restart-handwritten")
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", stream)
        .option("startingOffsets", "earliest")
        .load()
    )
    writer = (
        direct_counts(raw, int(emit_ms), LATENESS_MS)
        .writeStream.foreachBatch(
            lambda batch, _: (
                batch.write.format("kafka")
                .mode("append")
                .option("kafka.bootstrap.servers", settings.bootstrap_servers)
                .option("topic", output)
                .save()
            )
        )
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    with state_store(spark, "rocksdb"):
        query = writer.start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
