"""The Python example of docs/sql.md runs as the page says, as a plain script would."""

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "sql.md"


def test_the_script_gets_its_spark_and_workspace_and_tests_the_example_app(
    spark: SparkSession, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    [block] = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    # The suite's workspace is the one MILLRACE_HOME names, as a user's script would find it.
    monkeypatch.chdir(ROOT)
    namespace: dict = {}

    exec(compile(block, str(PAGE), "exec"), namespace)

    assert namespace["workspace"].root == workspace.root
    assert namespace["spark"] is spark
    assert namespace["window"]["n"] == 2
