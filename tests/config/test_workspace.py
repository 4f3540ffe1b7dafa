from pathlib import Path

import pytest

from millrace.config.workspace import Workspace, init_workspace
from millrace.errors import ConfigError


def test_millrace_home_names_the_workspace_else_it_is_dot_millrace_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Workspace.locate({"MILLRACE_HOME": str(tmp_path)}).root == tmp_path
    monkeypatch.chdir(tmp_path)
    assert Workspace.locate({}).root == tmp_path / ".millrace"


def test_init_creates_the_folders_and_a_config_file_and_keeps_it_the_second_time(
    tmp_path: Path,
) -> None:
    workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path / "ws")})
    assert init_workspace(workspace)
    assert workspace.config_file.read_text().startswith("# millrace workspace settings")
    assert workspace.kafka_dir.is_dir() and workspace.checkpoints_dir.is_dir()

    workspace.config_file.write_text("[kafka]\nport = 19092\n")
    assert not init_workspace(workspace)
    assert "19092" in workspace.config_file.read_text()
    assert init_workspace(workspace, force=True)
    assert "19092" not in workspace.config_file.read_text()


def test_commands_that_need_a_workspace_say_how_to_make_one(tmp_path: Path) -> None:
    workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path / "nothing")})
    with pytest.raises(ConfigError, match="no workspace at") as raised:
        workspace.require_initialized()
    assert "millrace init" in raised.value.hint
