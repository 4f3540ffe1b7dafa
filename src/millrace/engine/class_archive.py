"""The class-data archive of Spark's driver JVM: built once per install, mapped by every start.

A Spark driver loads and verifies some 20,000 classes before its first micro-batch. Java's
class-data sharing (CDS) keeps them parsed and verified in an archive file that a JVM maps
instead. On the 2-core machine a driver's start and first work (an aggregation and a Delta
write) took a median 6.0 s and 9.6 s of JVM CPU with the archive, against 8.9 s and 14.2 s
without (`benchmarks/driver_start.py --rounds 5`, docs/benchmarks.md#driver-start). Every
`millrace run`, `deploy`, `restart`, `rollback` and recovery after a kill starts a driver, so
each of them gains.

Setup builds it (`millrace.ops.class_archive_build`); `driver_options` names it to each
driver start. The archive's name carries a
fingerprint of the Java executable and of every jar on the driver's classpath: a JVM refuses
an archive written for another classpath, so a changed install simply finds no archive of its
name (and starts as before) until setup builds the new one. The fingerprint carries
`_WORKLOAD` too, so that an install builds again once the build exercises more.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyspark

from millrace.config.jvm import jars_dir, java_executable
from millrace.config.settings import Settings

# The first four bytes of a complete dynamic archive (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC,
# little-endian). The JVM writes them last, so a file cut short by a crash lacks them.
_DYNAMIC_ARCHIVE_MAGIC = bytes.fromhex("a8ab0bf0")
QUIET_SHARING = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""JVM options with which a mismatched or unreadable archive is skipped silently, as the JVM
does by default (-Xshare:auto), instead of printing a warning into the app's log."""
_WORKLOAD = "2: apps on Kafka"
"""What the build exercises; changed with `millrace.ops.class_archive_build`'s workload."""


def archive_file(settings: Settings, classpath: list[Path]) -> Path:
    """Where the archive of a driver with the jars `classpath` beside PySpark's own lives.

    It may not exist: setup builds it, for this install's Java and connectors.

    Example:
        >>> archive_file(Settings(jvm_jars_dir="/opt/jars"), []).name.startswith("spark-driver-")
        True
    """
    name = f"spark-driver-{_fingerprint(classpath)}.jsa"
    return jars_dir(settings) / "class-data" / name


def driver_options(settings: Settings, classpath: list[Path]) -> str:
    """The JVM options that map the archive into a driver; empty when there is no archive.

    Example:
        >>> driver_options(Settings(jvm_jars_dir="/nowhere"), [])
        ''
    """
    archive = archive_file(settings, classpath)
    if not is_complete(archive):
        return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET_SHARING}"


def is_complete(archive: Path) -> bool:
    """Whether `archive` is a whole archive: the JVM writes its first bytes last."""
    try:
        with archive.open("rb") as file:
            return file.read(len(_DYNAMIC_ARCHIVE_MAGIC)) == _DYNAMIC_ARCHIVE_MAGIC
    except OSError:
        return False


def _fingerprint(classpath: list[Path]) -> str:
    """A hash of what a driver's archive depends on.

    That is the Java executable and the jars on the driver's classpath (PySpark's own and
    `classpath`), each by path, size and change time, and the build's `_WORKLOAD`.
    """
    java = Path(os.path.realpath(java_executable()))
    pyspark_jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    digest = hashlib.sha256(_WORKLOAD.encode())
    for file in [java, *pyspark_jars, *classpath]:
        status = file.stat()
        digest.update(f"{file}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
