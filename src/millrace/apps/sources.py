"""What an app's source text names: a SQL app's file, or a processor class.

`millrace run`, the lifecycle (`deploy`, `restart`) and `backfill` all take an app as the text
the user gave: a SQL app's file (`examples/top_events.sql`), or a processor as `module:Class`
or `path/to/file.py:Class`. `source_kind` is where that text is told apart, so that every
verb takes the same text for the same kind of app. It loads nothing, so the CLI can call it
before it imports Spark.

Example:
    >>> source_kind("examples/zeitgeist.py:Zeitgeist")
    'processor'
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from millrace.errors import LifecycleError
from millrace.processor.loading import is_processor_target

Kind = Literal["sql", "processor"]
"""The kinds of app: a SQL app's file, or a processor class."""


def source_kind(source: str) -> Kind:
    """The kind of app `source` names: `"processor"` for `module:Class`, else `"sql"`.

    Text shaped like `module:Class` or `file.py:Class` names a processor, unless a file of
    that name exists: then it is a SQL app's file. Whether a SQL app's file exists is left to
    the caller, which says what to give instead.

    Example:
        >>> source_kind("examples/sessions.py:ActiveSessions")
        'processor'
        >>> source_kind("examples/top_events.sql")
        'sql'
    """
    if is_processor_target(source) and not Path(source).exists():
        return "processor"
    return "sql"


def require_source(source: str) -> None:
    """Refuse a SQL app's file that does not exist, before anything is loaded.

    Raises `LifecycleError` saying what to give instead. A processor's source is checked
    when it is loaded, since finding a module means importing it.

    Example:
        >>> try:
        ...     require_source("no/such/app.sql")
        ... except LifecycleError as error:
        ...     print(error.message)
        no file 'no/such/app.sql'
    """
    if source_kind(source) == "sql" and not Path(source).is_file():
        raise LifecycleError(
            f"no file {source!r}",
            hint="give a SQL app's file, or a processor as module:Class or file.py:Class",
        )
