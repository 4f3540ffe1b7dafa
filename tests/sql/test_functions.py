"""Python functions in SQL apps: plain and vectorised, from a module that is not installed.

The apps read their records from files (`tests.sql.file_sources`): what is tested is how the
compiler loads and calls functions, not reading the bus."""

import re
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millrace.config.workspace import Workspace
from millrace.errors import SqlError
from tests.sql.file_sources import run_from_files

APP = """
CREATE APPLICATION functions;
CREATE INPUT TABLE posts (text STRING, likes INT) FROM STREAM('posts') TIME ts;
CREATE FUNCTION shout AS 'post_functions.shout';
CREATE FUNCTION doubled AS 'post_functions.doubled';
INSERT INTO STREAM('loud_posts')
SELECT shout(text) AS text, doubled(likes) AS likes FROM posts WHERE likes > 0;
"""


@pytest.fixture
def functions_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module beside the app, on the driver's path only, as a user's own code is."""
    (tmp_path / "post_functions.py").write_text(
        textwrap.dedent(
            """
            import pandas as pd
            from pyspark.sql.functions import pandas_udf

            def shout(text: str) -> str:
                return text.upper() + "!"

            @pandas_udf("double")
            def doubled(likes: pd.Series) -> pd.Series:
                return likes * 2.0
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("post_functions", None)


def test_an_app_calls_plain_and_vectorised_python_functions(
    spark: SparkSession, workspace: Workspace, functions_module: None
) -> None:
    result = run_from_files(
        spark,
        workspace,
        APP,
        {"posts": [{"text": "hello", "likes": 2}, {"text": "quiet", "likes": 0}]},
    )
    assert result.streams["loud_posts"] == [{"text": "HELLO!", "likes": 4.0}]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module.f", "cannot import module 'no_such_module'"),
        ("post_functions.whisper", "module 'post_functions' has no 'whisper'"),
    ],
)
def test_a_function_that_cannot_be_loaded_is_reported_at_its_statement(
    spark: SparkSession, workspace: Workspace, functions_module: None, target: str, message: str
) -> None:
    app = APP.replace("'post_functions.shout'", f"'{target}'")
    with pytest.raises(SqlError, match=rf"<string>:4:1: function shout: {message}"):
        run_from_files(spark, workspace, app, {"posts": []})


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def shout(text:\n    return text\n", r"broken_functions.py:1:10: SyntaxError: "),
        (
            "import json\n\nLIMITS = json.loads('{')\n",
            r"broken_functions.py:3: loading broken_functions raised JSONDecodeError",
        ),
    ],
)
def test_a_function_module_that_cannot_run_is_named_at_its_line(
    spark: SparkSession,
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    message: str,
) -> None:
    (tmp_path / "broken_functions.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_functions", raising=False)
    app = APP.replace("'post_functions.shout'", "'broken_functions.shout'")

    with pytest.raises(SqlError) as raised:
        run_from_files(spark, workspace, app, {"posts": []})

    assert raised.value.message.startswith(f"<string>:4:1: function shout: {tmp_path}/")
    assert re.search(message, raised.value.message), raised.value.message
