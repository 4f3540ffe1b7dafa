"""The process `deploy` starts: the app's driver, which records how it ended in the registry."""

import json
import os
import subprocess
import sys
from pathlib import Path

from millrace.config.workspace import Workspace
from millrace.ops import registry
from millrace.ops.lifecycle import DEPLOYED_MODULE


def test_a_deployed_process_that_cannot_start_says_why_and_records_its_exit(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    gone = tmp_path / "gone.sql"
    arguments = ["--workspace", str(fresh_workspace.root), "--app", "gone"]
    arguments += ["--trigger", "micro-batch", str(gone)]
    ended = subprocess.run(
        [sys.executable, "-m", DEPLOYED_MODULE, *arguments],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MILLRACE_HOME": str(fresh_workspace.root)},
    )
    assert ended.returncode == 1
    assert ended.stderr.startswith(f"error[lifecycle]: no file {str(gone)!r}"), ended.stderr
    assert "Traceback" not in ended.stderr
    recorded = json.loads((registry.app_dir(fresh_workspace, "gone") / "exit.json").read_text())
    assert recorded["code"] == 1
