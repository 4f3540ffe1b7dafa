"""What the docstring examples of src/millrace find without importing: `Path`, `Settings` and
a fresh temporary folder, `tmp_path`.

`make test` runs those examples with `pytest --doctest-modules src/millrace/...`. pytest
finds a conftest.py only in the folders of what it collects and their parents, so
tests/conftest.py never reaches src/; this module is a plugin instead, loaded in every run by
`-p tests.doctest_namespace` in pyproject.toml (whose `pythonpath` makes `tests` importable
before plugins load). The examples start no server: no Kafka, Redis or Spark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _pytest.doctest import DoctestItem

from millrace.config.settings import Settings


@pytest.fixture(autouse=True)
def _names_for_examples(request: pytest.FixtureRequest, doctest_namespace: dict[str, Any]) -> None:
    """`Path`, `Settings` and, for each docstring's examples, a new empty `tmp_path`."""
    if isinstance(request.node, DoctestItem):
        doctest_namespace["Path"] = Path
        doctest_namespace["Settings"] = Settings
        doctest_namespace["tmp_path"] = request.getfixturevalue("tmp_path")
