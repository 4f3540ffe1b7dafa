"""Tests of the examples under examples/, which is not a package: `load_example` imports one."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """The module of `examples/<name>.py`, imported by path once and then reused.

    Example:
        >>> load_example("zeitgeist").Zeitgeist.name
        'zeitgeist'
    """
    module_name = f"millrace_examples.{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
