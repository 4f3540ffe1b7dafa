"""Finding a processor class from what a user types: `module:Class` or `path/file.py:Class`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from millrace.errors import ProcessorError, import_failure
from millrace.processor.processor import Processor


def is_processor_target(text: str) -> bool:
    """True for text shaped like `module:Class` or `file.py:Class`, not a SQL app's path.

    Example:
        >>> is_processor_target("examples/zeitgeist.py:Zeitgeist")
        True
        >>> is_processor_target("examples/top_events.sql")
        False
    """
    where, colon, name = text.rpartition(":")
    return bool(colon and where and name.isidentifier())


def load_processor(target: str) -> type[Processor]:
    r"""The `Processor` subclass that `target` names, checked; `ProcessorError` if it cannot be.

    `target` is `module:Class` (a module importable from the working directory or the
    virtualenv) or `path/to/file.py:Class`.

    Example:
        >>> _ = (tmp_path / "pages.py").write_text(
        ...     "from millrace import Input, Processor, ValueState\n"
        ...     "class PageCount(Processor):\n"
        ...     "    name = 'page_count'\n"
        ...     "    inputs = [Input('clicks', key='page')]\n"
        ...     "    count = ValueState(int)\n"
        ...     "    def on_record(self, key, record, ctx): self.count.set(self.count.get(0) + 1)\n"
        ... )
        >>> load_processor(f"{tmp_path}/pages.py:PageCount").kind()
        'stateful'
    """
    where, _, name = target.rpartition(":")
    if not is_processor_target(target):
        raise ProcessorError(
            f"{target!r} does not name a processor",
            hint="write module:Class or path/to/file.py:Class, such as "
            "examples/zeitgeist.py:Zeitgeist",
        )
    module = _module_from_file(Path(where)) if where.endswith(".py") else _module(where)
    found = getattr(module, name, None)
    if found is None:
        raise ProcessorError(
            f"{where} has no {name!r}",
            hint=f"define class {name}(Processor) in {module.__file__}, or check the spelling",
        )
    if not (isinstance(found, type) and issubclass(found, Processor)):
        raise ProcessorError(
            f"{where}:{name} is a {type(found).__name__}, not a Processor class",
            hint=f"name a class that subclasses millrace.Processor, such as `class {name}"
            "(Processor): ...`",
        )
    found.validate()
    return found


def _module(name: str) -> ModuleType:
    if str(Path.cwd()) not in sys.path:
        # As `python -m` would: a module next to where the command runs can be named.
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ProcessorError(
            f"cannot import module {name!r}: {error}",
            hint="run from the folder that holds it, install it in the virtualenv, or give "
            "its file: path/to/file.py:Class",
        ) from None
    except Exception as error:
        raise import_failure(error, name, ProcessorError) from None


def _module_from_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise ProcessorError(
            f"no file {path}", hint="give the path of the .py file that defines the processor"
        )
    module_name = f"millrace_processor_{path.stem}"
    specification = importlib.util.spec_from_file_location(module_name, path)
    if specification is None or specification.loader is None:
        raise ProcessorError(f"{path} is not a Python module", hint="give a .py file")
    module = importlib.util.module_from_spec(specification)
    # Registered before running it, so that classes and pickling can find their module.
    sys.modules[module_name] = module
    try:
        specification.loader.exec_module(module)
    except Exception as error:
        raise import_failure(error, str(path), ProcessorError) from None
    return module
