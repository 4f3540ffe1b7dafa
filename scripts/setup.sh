#!/usr/bin/env bash
# One idempotent setup step: Debian packages, Java check, the virtualenv with the pinned Python
# packages, and the JVM artifacts resolved by Maven. A step whose inputs have not changed since
# its last success is skipped, so running this again is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${MILLRACE_VENV:-.venv}"
jars_dir="$venv/share/millrace/jars"
# Debian packages the project needs. Tools found on the PATH are not installed again.
# chromium runs the dashboard's browser tests; openssl makes the local broker's TLS certificates.
debian_packages=(maven redis-server chromium openssl)
declare -A provides=([maven]=mvn [redis-server]=redis-server [chromium]=chromium [openssl]=openssl)

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }
fail() { printf '\033[1;31msetup failed:\033[0m %s\n' "$*" >&2; exit 1; }

missing=()
for package in "${debian_packages[@]}"; do
    command -v "${provides[$package]:-$package}" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        fail "missing Debian packages: ${missing[*]}; install them (as root: apt-get install ${missing[*]}) and run again"
    fi
    say "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

java_version=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1 || true)
if [[ -z "$java_version" ]]; then
    fail "no Java found on the PATH; millrace needs Java 17 or newer for Spark and Kafka (Debian: apt-get install openjdk-17-jdk-headless)"
elif ((java_version < 17)); then
    fail "Java $java_version found, millrace needs Java 17 or newer for Spark and Kafka (Debian: apt-get install openjdk-17-jdk-headless, then point JAVA_HOME at it)"
fi

python_stamp="$venv/.millrace-python"
python_inputs=$(cat pyproject.toml scripts/pyspark_bytecode.py | sha256sum | cut -d' ' -f1)
if [[ ! -x "$venv/bin/python" ]]; then
    say "creating the virtualenv in $venv"
    python3 -m venv "$venv"
fi
if [[ "$(cat "$python_stamp" 2>/dev/null)" != "$python_inputs" ]]; then
    say "installing the Python packages (PySpark is large: this takes a few minutes the first time)"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet --editable '.[dev]'
    # Spark's Python workers import PySpark from its pyspark.zip, which has no bytecode: each
    # worker compiled PySpark again, and a processor's first one overran Spark's 10 s wait on
    # a busy machine (the script says more).
    "$venv/bin/python" scripts/pyspark_bytecode.py
    echo "$python_inputs" > "$python_stamp"
fi

jars_stamp="$jars_dir/.millrace-jars"
# The poms, and the sources of millrace's own Spark extension (jvm/spark-extensions), which
# Maven compiles.
jars_inputs=$(find jvm -name pom.xml -o -name settings.xml -o -path '*/src/*' -type f \
    | LC_ALL=C sort | xargs cat | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$jars_stamp" 2>/dev/null)" != "$jars_inputs" ]]; then
    say "resolving the JVM artifacts (Kafka broker, Spark's Kafka connector, Delta, the tests' HDFS) and building millrace's Spark extension with Maven"
    rm -rf "$jars_dir"
    mvn --batch-mode --quiet --settings jvm/settings.xml --file jvm/pom.xml package \
        "-Djars.output=$PWD/$jars_dir" || fail "Maven could not resolve the JVM artifacts (see its output above)"
    echo "$jars_inputs" > "$jars_stamp"
fi

# Spark's drivers map the classes they load from one archive instead of loading them at each
# start (src/millrace/engine/class_archive.py; src/millrace/ops/class_archive_build.py builds
# it); its name follows Java and the jars, so a changed install builds a new one. Without it
# drivers only start slower.
"$venv/bin/python" -m millrace.ops.class_archive_build \
    || say "warning: no class-data archive for Spark's drivers (the error above); they start slower"
say "ready: $venv (activate with: source $venv/bin/activate)"
