"""Add bytecode to PySpark's pyspark.zip, which Spark's Python workers import PySpark from.

Spark puts `<SPARK_HOME>/python/lib/pyspark.zip` first on its workers' PYTHONPATH, and the
zip PySpark's wheel ships holds sources only: Python cannot cache bytecode in a zip, so every
worker Spark starts compiled PySpark's modules again. A processor app's first micro-batch
starts such a worker and waits for it at most 10 seconds (a limit fixed in Spark); compiling
cost it 0.7 s of CPU where bytecode takes 0.25 s, and on a 2-core machine at load 30 the wait
ran out ("Python worker failed to connect back").

Each module's bytecode is added beside its source, as unchecked hash-based .pyc (PEP 552), so
that zipimport uses it without comparing times; a zip that has bytecode is left as it is.
Run by scripts/setup.sh with the virtualenv's Python, the one that runs the workers, on the
installed zip, or on the zip given as its argument.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import zipfile
from pathlib import Path

_UNCHECKED_HASH = (0b01).to_bytes(4, "little")


def add_bytecode(archive: Path) -> bool:
    """Rewrite `archive` with each .py's bytecode beside it; False when it had bytecode."""
    with zipfile.ZipFile(archive) as source:
        entries = source.infolist()
        if any(entry.filename.endswith(".pyc") for entry in entries):
            return False
        rewritten = archive.with_suffix(".zip.new")
        with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as target:
            for entry in entries:
                text = source.read(entry)
                target.writestr(entry, text)
                if entry.filename.endswith(".py"):
                    # The path zipimport gives a module it compiles, for the same tracebacks.
                    where = f"{archive}{os.sep}{entry.filename}"
                    code = compile(text, where, "exec", dont_inherit=True)
                    header = (
                        importlib.util.MAGIC_NUMBER
                        + _UNCHECKED_HASH
                        + importlib.util.source_hash(text)
                    )
                    target.writestr(entry.filename + "c", header + marshal.dumps(code))
    os.replace(rewritten, archive)
    return True


if __name__ == "__main__":
    # Found without importing PySpark, which takes seconds.
    package = importlib.util.find_spec("pyspark")
    if package is None or package.origin is None:
        sys.exit(f"setup: PySpark is not installed for {sys.executable}")
    installed = Path(package.origin).parent / "python" / "lib" / "pyspark.zip"
    zip_path = Path(sys.argv[1]) if len(sys.argv) > 1 else installed
    if add_bytecode(zip_path):
        print(f"setup: added bytecode to {zip_path}", file=sys.stderr)
