"""Loading a processor from `file.py:Class`: a file that cannot run is named at its line."""

from pathlib import Path

import pytest

from millrace.errors import ProcessorError
from millrace.processor.loading import load_processor


def test_a_syntax_error_is_named_at_its_file_line_and_column(tmp_path: Path) -> None:
    source = tmp_path / "broken_syntax.py"
    source.write_text("from millrace import Processor\nclass Counts(Processor:\n    pass\n")

    with pytest.raises(ProcessorError) as raised:
        load_processor(f"{source}:Counts")

    assert raised.value.message.startswith(f"{source}:2:23: SyntaxError: invalid syntax")
    assert "class Counts(Processor:" in raised.value.message
    assert f"python -m py_compile {source}" in (raised.value.hint or "")


def test_an_indentation_error_is_a_syntax_error_with_its_own_name(tmp_path: Path) -> None:
    source = tmp_path / "broken_indent.py"
    source.write_text("if True:\nx = 1\n")

    with pytest.raises(ProcessorError, match=rf"{source}:2:1: IndentationError: expected an"):
        load_processor(f"{source}:Counts")


def test_an_exception_of_the_modules_top_level_is_named_at_its_line(tmp_path: Path) -> None:
    source = tmp_path / "raises_on_import.py"
    source.write_text("import json\n\nLIMITS = json.loads('{')\n")

    with pytest.raises(ProcessorError) as raised:
        load_processor(f"{source}:Counts")

    assert raised.value.message.startswith(f"{source}:3: loading {source} raised JSONDecodeError")
    assert "top level" in (raised.value.hint or "")


def test_a_bad_processor_class_keeps_its_own_message(tmp_path: Path) -> None:
    source = tmp_path / "bad_option.py"
    source.write_text(
        "from millrace import Processor\nclass Counts(Processor):\n    on_error = 'retry'\n"
    )

    with pytest.raises(ProcessorError, match=r"^Counts\.on_error is 'retry'"):
        load_processor(f"{source}:Counts")
