"""The class-data archive setup builds: every driver maps it, and one that cannot use it
starts as before, silently."""

import subprocess
from pathlib import Path

from pyspark.sql import SparkSession

from millrace.config.jvm import java_executable
from millrace.config.settings import Settings
from millrace.engine import spark_internals
from millrace.engine.class_archive import archive_file, driver_options
from millrace.engine.session import connector_jars


def test_the_drivers_spark_starts_map_the_archive_setup_built(
    spark: SparkSession, settings: Settings
) -> None:
    archive = archive_file(settings, connector_jars(settings))
    assert archive.exists(), "scripts/setup.sh builds it: run `make setup`"

    driver = spark_internals.driver_pid(spark)
    mapped = Path(f"/proc/{driver}/maps").read_text()

    assert str(archive) in mapped


def test_the_archive_holds_the_kafka_client_apps_load(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    connectors = connector_jars(settings)
    options = driver_options(settings, connectors)
    assert options, "scripts/setup.sh builds the archive: run `make setup`"
    kafka_client = next(jar for jar in connectors if jar.name.startswith("kafka-clients-"))
    # A JVM maps the archive only with the classpath it was built with: the driver's.
    command_line = Path(f"/proc/{spark_internals.driver_pid(spark)}/cmdline").read_bytes()
    arguments = command_line.decode().split("\0")
    classpath = arguments[arguments.index("-cp") + 1]
    # As in a driver, Spark's class loader loads the connectors' jars (spark.jars).
    loader = tmp_path / "LoadFromJar.java"
    loader.write_text(_LOAD_FROM_JAR)

    loaded = subprocess.run(
        [
            java_executable(),
            *options.split(),
            "-Xlog:class+load=info",
            "-cp",
            classpath,
            str(loader),
            str(kafka_client),
            "org.apache.kafka.clients.consumer.KafkaConsumer",
        ],
        capture_output=True,
        text=True,
    )

    assert loaded.returncode == 0, loaded.stderr
    line = next(
        line
        for line in loaded.stdout.splitlines()
        if " org.apache.kafka.clients.consumer.KafkaConsumer source: " in line
    )
    assert "source: shared objects file" in line


_LOAD_FROM_JAR = """\
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Path;

public class LoadFromJar {
    public static void main(String[] arguments) throws Exception {
        URL jar = Path.of(arguments[0]).toUri().toURL();
        ClassLoader parent = LoadFromJar.class.getClassLoader();
        try (URLClassLoader loader = new URLClassLoader(new URL[] {jar}, parent)) {
            Class.forName(arguments[1], false, loader);
        }
    }
}
"""


def test_a_changed_classpath_names_another_archive(settings: Settings, tmp_path: Path) -> None:
    connectors = connector_jars(settings)
    added = tmp_path / "added-1.0.jar"
    added.write_bytes(b"")

    assert archive_file(settings, [*connectors, added]) != archive_file(settings, connectors)


def test_an_archive_cut_short_is_not_given_to_a_driver(tmp_path: Path) -> None:
    settings = Settings(jvm_jars_dir=str(tmp_path))
    archive = archive_file(settings, [])
    archive.parent.mkdir()
    # The JVM writes the header, with its magic number, last: a crash leaves it zeroed.
    archive.write_bytes(bytes(4096))

    assert driver_options(settings, []) == ""


def test_a_jvm_given_an_archive_of_another_classpath_starts_and_says_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    options = driver_options(settings, connector_jars(settings))
    assert options, "scripts/setup.sh builds the archive: run `make setup`"

    started = subprocess.run(
        [java_executable(), *options.split(), "-cp", str(tmp_path), "-version"],
        capture_output=True,
        text=True,
    )

    assert started.returncode == 0
    assert "cds" not in started.stdout + started.stderr
