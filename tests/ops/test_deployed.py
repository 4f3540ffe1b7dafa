"""The process `deploy` starts: the app's driver, which records how it ended in the registry."""

import json
import os
import subprocess
import sys
from pathlib import Path

from millrace.apps.options import RunOptions
from millrace.config.workspace import Workspace
from millrace.ops.deployed import DEPLOYED_MODULE, DeployedRun


def test_a_deployed_process_that_cannot_start_says_why_and_records_its_exit(
    fresh_workspace: Workspace, tmp_path: Path
) -> None:
    gone = tmp_path / "gone.sql"
    handed = DeployedRun("gone", str(gone), RunOptions()).handed_over()
    ended = subprocess.run(
        [sys.executable, "-m", DEPLOYED_MODULE],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **handed, "MILLRACE_HOME": str(fresh_workspace.root)},
    )
    assert ended.returncode == 1
    assert ended.stderr.startswith(f"error[lifecycle]: no file {str(gone)!r}"), ended.stderr
    assert "Traceback" not in ended.stderr
    recorded = json.loads(fresh_workspace.app_exit("gone").read_text())
    assert recorded["code"] == 1
