"""Shipping the user's own Python code (UDFs, processors) to Spark's Python workers.

A worker imports what a task needs by module name. A module that is installed (the standard
library, site-packages) imports there as on the driver; a module of the user's, loaded from
the app's folder or a file path, may not: its code is then sent with the task, by value, as
on a cluster whose workers have only the installed packages.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from types import ModuleType

from pyspark import cloudpickle


def ship_with_tasks(module: ModuleType) -> None:
    """Send `module`'s code with Spark's tasks, unless the workers can import it themselves."""
    if _is_users_module(module):
        # PySpark's copy of cloudpickle has no annotations.
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _is_users_module(module: ModuleType) -> bool:
    path = getattr(module, "__file__", None)
    if path is None:
        return False
    installed = {
        sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    return not any(Path(path).is_relative_to(folder) for folder in installed)
