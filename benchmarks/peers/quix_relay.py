"""The keyed stage of benchmarks/latency.py in Quix Streams, run from benchmarks/.venv-quix.

`benchmarks/.venv-quix/bin/python benchmarks/peers/quix_relay.py SETTINGS_JSON` reads the
input topic from its start with `processing_guarantee="exactly-once"` (`quix_app`), keys each
record by its `key` (`group_by`: Quix Streams' way to key by a field, through a repartition
topic, since the records come without a Kafka key), and writes it on as
`{"key", "sent_ms", "n"}` to the output topic, keyed. It commits every `commit_interval_ms`,
and what it writes is visible once committed. It prints one JSON line, `{"settings": ...}`,
and runs until it gets SIGTERM.
"""

import json
import sys

from quix_app import application, settings


def main() -> None:
    run = json.loads(sys.argv[1])
    app = application(run, commit_interval=run["commit_interval_ms"] / 1000)
    records = app.topic(run["input"], value_deserializer="json")
    relayed = app.topic(run["output"], value_serializer="json", key_serializer="str")
    sdf = app.dataframe(records).group_by("key")
    sdf = sdf.apply(lambda value: {"key": value["key"], "sent_ms": value["time"], "n": value["n"]})
    sdf.to_topic(relayed)
    stage = "group_by(key) through a repartition topic, apply; no state"
    job = {"commit_interval_ms": run["commit_interval_ms"], "stage": stage}
    print(json.dumps({"settings": settings(**job)}), flush=True)
    app.run()


if __name__ == "__main__":
    main()
