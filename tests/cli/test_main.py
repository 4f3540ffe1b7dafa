import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pyspark", "pandas", "delta", "sqlglot")

# Runs the `millrace` entry point in a fresh interpreter, then lists what it had imported.
_RUN_AND_LIST_IMPORTS = """
import json, sys
from millrace.cli.main import main
sys.argv = ["millrace", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))))
"""


@pytest.mark.parametrize("arguments", [["--help"], ["ps"], ["stream", "--help"]])
def test_verbs_that_need_no_spark_do_not_load_spark_pandas_delta_or_sqlglot(
    arguments: list[str], tmp_path: Path
) -> None:
    environment = {**os.environ, "MILLRACE_HOME": str(tmp_path / "ws")}
    subprocess.run([sys.executable, "-m", "millrace.cli.main", "init"], env=environment, check=True)
    script = f"HEAVY = {HEAVY!r}\n{_RUN_AND_LIST_IMPORTS}"
    done = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == [], f"millrace {' '.join(arguments)} imported {loaded}"
