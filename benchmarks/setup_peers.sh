#!/usr/bin/env bash
# The peers that benchmarks/processors.py and benchmarks/latency.py run beside millrace, each in a
# virtualenv of its own: their pins clash with the project's (PyFlink wants older pandas and
# pyarrow and its own py4j, Quix Streams an older confluent-kafka), so neither goes into .venv.
# Run it from the repository's root after `make setup`: `bash benchmarks/setup_peers.sh`.
set -euo pipefail

FLINK_VERSION=2.2.1
# Flink's Kafka connector is released apart from Flink; 5.0.0-2.2 is the one built for 2.2.
FLINK_KAFKA_CONNECTOR=5.0.0-2.2
QUIX_VERSION=3.28.1

cd "$(dirname "$0")/.."
say() { echo "setup_peers: $*"; }

peer_venv() {
    local venv=$1 requirement=$2
    if [[ "$("$venv/bin/python" -m pip show "${requirement%%==*}" 2>/dev/null | sed -n 's/^Version: //p')" \
        != "${requirement##*==}" ]]; then
        say "installing $requirement into $venv"
        python3.11 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet "$requirement"
    fi
}

peer_venv benchmarks/.venv-flink "apache-flink==$FLINK_VERSION"
peer_venv benchmarks/.venv-quix "quixstreams==$QUIX_VERSION"

jar=benchmarks/.venv-flink/jars/flink-sql-connector-kafka-$FLINK_KAFKA_CONNECTOR.jar
if [[ ! -f "$jar" ]]; then
    say "fetching Flink's Kafka connector $FLINK_KAFKA_CONNECTOR from Maven Central"
    mvn --batch-mode --quiet --settings jvm/settings.xml dependency:copy \
        "-Dartifact=org.apache.flink:flink-sql-connector-kafka:$FLINK_KAFKA_CONNECTOR" \
        "-DoutputDirectory=$(dirname "$jar")"
fi
say "ready: benchmarks/.venv-flink (PyFlink $FLINK_VERSION), benchmarks/.venv-quix (Quix Streams $QUIX_VERSION)"
