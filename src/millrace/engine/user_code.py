"""Shipping the user's own Python code (UDFs, processors) to Spark's Python workers.

A worker imports what a task needs by module name. A module that is installed (the standard
library, site-packages) imports there as on the driver; a module of the user's, loaded from
the app's folder or a file path, may not: its code is then sent with the task, by value, as
on a cluster whose workers have only the installed packages.

When that code raises in a task, the query stops with Spark's error, whose text holds the
worker's Python traceback among the JVM's: `failure_in_user_code` makes of it the error a user
acts on, the exception and the line of the user's code that raised it.
"""

from __future__ import annotations

import functools
import os
import re
import sysconfig
from pathlib import Path
from types import ModuleType

from pyspark import cloudpickle

from millrace.errors import SqlError

_MILLRACE = os.path.join(Path(__file__).parents[1], "")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (?P<why>.*)$")


def ship_with_tasks(module: ModuleType) -> None:
    """Send `module`'s code with Spark's tasks, unless the workers can import it themselves."""
    if is_users_module(module):
        # PySpark's copy of cloudpickle has no annotations.
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def failure_in_user_code(error: Exception, app: str) -> SqlError | None:
    r"""What `app`'s own Python code raised in a task that stopped a query; None if it did not.

    Example:
        >>> text = (
        ...     "Python worker: Traceback (most recent call last):\n"
        ...     '  File "/apps/checks.py", line 4, in checked\n'
        ...     '    raise ValueError("no such category")\n'
        ...     "ValueError: no such category\n"
        ...     "  at org.apache.spark.api.python.BasePythonRunner"
        ... )
        >>> print(failure_in_user_code(RuntimeError(text), "shop").message)
        app 'shop' stopped: its function raised ValueError: no such category, at
        /apps/checks.py:4 (in checked)
    """
    lines = str(error).splitlines()
    frames = [
        (number, found)
        for number, found in enumerate(map(_FRAME.match, lines))
        # millrace's own frames (a foreachBatch of its writers) are not where the user looks.
        if found is not None and not _is_installed_or_millrace(found["path"])
    ]
    if not frames:
        return None
    number, frame = frames[-1]
    raised = next(
        (found for found in map(_RAISED.match, lines[number + 1 :]) if found is not None), None
    )
    what = f"{raised['type']}: {raised['why']}" if raised is not None else "an exception"
    return SqlError(
        f"app {app!r} stopped: its function raised {what}, at {frame['path']}:{frame['line']} "
        f"(in {frame['function']})",
        hint="fix the function there (or filter out the records it cannot take in the app's "
        "SQL), then start the app again: it goes on from its last committed micro-batch",
    )


def is_users_module(module: ModuleType) -> bool:
    """True for a module of the user's own code: not installed, and not millrace's own."""
    path = getattr(module, "__file__", None)
    return isinstance(path, str) and not _is_installed_or_millrace(path)


# A host asks this of each of its thousands of modules at every app's start, holding the lock
# that keeps apps' imports apart: a look must be a string comparison, not sysconfig's work.
def _is_installed_or_millrace(path: str) -> bool:
    return os.path.normpath(path).startswith(_not_users_folders())


@functools.cache
def _not_users_folders() -> tuple[str, ...]:
    """The folders of the standard library, site-packages and millrace, with a separator."""
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    installed = {os.path.join(sysconfig.get_path(name), "") for name in names}
    return (*installed, _MILLRACE)
