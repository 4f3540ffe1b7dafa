"""The keyed stage of benchmarks/latency.py in PyFlink, run from benchmarks/.venv-flink.

`benchmarks/.venv-flink/bin/python benchmarks/peers/flink_relay.py SETTINGS_JSON` reads the
input topic from its start with no end (parallelism 2), decodes each record's JSON in Python,
keys it by its `key` (`key_by`: a record goes to its key's task), and writes it on as
`{"key", "sent_ms", "n"}` to the output topic through Kafka transactions committed by
exactly-once checkpoints every `commit_interval_ms` (`flink_kafka`). Once the job is
submitted it prints one JSON line, `{"settings": ...}`, and runs until its process group is
stopped.
"""

import json
import sys
import uuid

from flink_kafka import environment, exactly_once_sink, kafka_source, settings
from pyflink.common import Types, WatermarkStrategy


def _decoded(value):
    record = json.loads(value)
    return record["key"], record["time"], record["n"]


def _relayed(record):
    return json.dumps({"key": record[0], "sent_ms": record[1], "n": record[2]})


def main() -> None:
    run = json.loads(sys.argv[1])
    interval_ms = run["commit_interval_ms"]
    env = environment(run, interval_ms)
    (
        env.from_source(kafka_source(run, bounded=False), WatermarkStrategy.no_watermarks(), "read")
        .map(_decoded, output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()]))
        .key_by(lambda record: record[0], key_type=Types.STRING())
        .map(_relayed, output_type=Types.STRING())
        .sink_to(exactly_once_sink(run))
    )
    job = env.execute_async(f"bench-flink-relay-{uuid.uuid4().hex[:8]}")
    stage = "decode, key_by(key), encode; no state"
    print(json.dumps({"settings": {**settings(run, interval_ms), "stage": stage}}), flush=True)
    job.get_job_execution_result().result()


if __name__ == "__main__":
    main()
