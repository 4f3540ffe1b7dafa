"""Where the JVM side lives: the Java executable and the jars that scripts/setup.sh resolved."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Literal

from millrace.config.settings import Settings
from millrace.errors import SetupError

JarSet = Literal["kafka", "spark", "hdfs"]
"""The classpaths resolved from jvm/pom.xml: the Kafka broker's, Spark's connectors, and
Hadoop's MiniDFSCluster (a NameNode and a DataNode in one JVM) that the tests run HDFS with."""

_SETUP_HINT = "run `bash scripts/setup.sh` (or `make setup`) in the millrace repository"


def jars_dir(settings: Settings) -> Path:
    """The folder that holds one subfolder of jars per `JarSet`."""
    if settings.jvm_jars_dir:
        return Path(settings.jvm_jars_dir)
    return Path(sys.prefix) / "share" / "millrace" / "jars"


def jars(settings: Settings, jar_set: JarSet) -> list[Path]:
    """The jars of one set, sorted by name; `SetupError` when setup has not resolved them.

    Example:
        >>> [jar.name for jar in jars(Settings(), "kafka")][:1]
        ['HdrHistogram-2.2.2.jar']
    """
    folder = jars_dir(settings) / jar_set
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise SetupError(f"no {jar_set} jars in {folder}", hint=_SETUP_HINT)
    return found


def java_executable() -> str:
    """The `java` of `JAVA_HOME`, else the one on the PATH; `SetupError` when there is none."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise SetupError(
            "no Java found (JAVA_HOME is not set and `java` is not on the PATH)",
            hint="install Java 17 or newer (Debian: apt-get install openjdk-17-jdk-headless)",
        )
    return found
