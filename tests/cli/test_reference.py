from pathlib import Path

from click.testing import CliRunner

from millrace.cli.main import cli
from millrace.cli.reference import render

PAGE = Path(__file__).parents[2] / "docs" / "cli.md"


def test_the_cli_reference_page_is_the_commands_own_help() -> None:
    assert PAGE.read_text() == render(), (
        "docs/cli.md is out of date: run `.venv/bin/python -m millrace.cli.reference > docs/cli.md`"
    )


def test_the_reference_covers_every_command() -> None:
    page = PAGE.read_text()
    for name in cli.commands:
        assert f"## millrace {name}\n" in page


def test_the_reference_is_the_same_once_the_cli_has_run_in_the_process() -> None:
    before = render()
    assert CliRunner().invoke(cli, ["stream", "--help"]).exit_code == 0

    assert render() == before
    assert "-h, --help" in before, "as a user's `millrace -h` shows it"
