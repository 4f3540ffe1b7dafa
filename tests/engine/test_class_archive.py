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
