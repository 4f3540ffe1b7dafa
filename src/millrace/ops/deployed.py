"""The process of a deployed app: its driver, started by `deploy`, detached from any terminal.

`millrace.ops.lifecycle` starts it as `python -m millrace.ops.deployed`, in a process group
of its own, its output appended to `<workspace>/apps/<app>/app.log`, handing it the app's
driver lock (`millrace.ops.driver_lock`) and what to run: the app's name, its source and its
`RunOptions`, as JSON in its environment (`DeployedRun`), checked by the verb that started
it (`millrace.ops.lifecycle.check_start`), so nothing is checked or parsed again here. It
runs the app as `millrace run` does (`millrace.apps.runner.drive`), saying its progress to
the log (rotated by `millrace.ops.app_logs`) and recording the CPU it uses
(`millrace.ops.driver_cpu`), and records in the registry how it ended
(`millrace.ops.registry.record_exit`), which `ps` and the demo read: 0 once stopped or at
the end of its input, else 1 (130 when interrupted). A millrace error is written to the log
as the CLI prints it (`error[code]: ...`), without a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from millrace.apps.app import App
from millrace.apps.options import RunOptions
from millrace.apps.runner import drive
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.engine.disk_full import disk_full_on_write
from millrace.errors import LifecycleError, MillraceError
from millrace.ops import checkpoints, driver_cpu, driver_lock, registry
from millrace.ops.app_logs import rotate_if_large

DEPLOYED_MODULE = "millrace.ops.deployed"
"""The module a deployed app's process runs (`python -m`): the app's driver."""

RUN_ENV = "MILLRACE_DEPLOYED_RUN"
"""Set by `deploy` in the started process's environment: the `DeployedRun`, as JSON."""


@dataclass(frozen=True)
class DeployedRun:
    """What a deployed app's process runs: the app's name and source, and its options.

    Example:
        >>> run = DeployedRun("top_events", "/apps/top_events.sql", RunOptions())
        >>> DeployedRun.handed(run.handed_over()) == run
        True
    """

    app: str
    source: str
    options: RunOptions

    def handed_over(self) -> dict[str, str]:
        """The environment that hands this run to the process `deploy` starts."""
        text = {"app": self.app, "source": self.source, "options": self.options.to_json()}
        return {RUN_ENV: json.dumps(text)}

    @classmethod
    def handed(cls, environ: Mapping[str, str]) -> DeployedRun:
        """The run `handed_over` put in `environ`; `LifecycleError` when there is none."""
        try:
            given = json.loads(environ[RUN_ENV])
            options = RunOptions.from_json(given["options"])
            return cls(str(given["app"]), str(given["source"]), options)
        except (KeyError, TypeError, ValueError):
            raise LifecycleError(
                f"this process was started without the run to drive ({RUN_ENV})",
                hint="deployed apps are started by `millrace deploy APP`; "
                "`millrace run APP` runs one in a terminal",
            ) from None


def main() -> None:
    """Run the deployed app that `deploy` handed over, and record how it ended; exit with that."""
    try:
        run = DeployedRun.handed(os.environ)
    except LifecycleError as error:
        print(error.render(), file=sys.stderr, flush=True)
        sys.exit(1)
    # The environment still sets the settings (MILLRACE_SPARK_*, as the demo does).
    workspace = Workspace.locate()
    code = 1
    try:
        app = App.load(run.source)
        with (
            driver_lock.hold(workspace, run.app, source=app.source),
            driver_cpu.recording(workspace, run.app),
        ):
            try:
                drive(
                    workspace.require_initialized(),
                    app,
                    run.options,
                    say=functools.partial(_say, workspace.app_log(run.app), workspace.settings),
                    on_progress=lambda: checkpoints.remember(workspace, app.name),
                )
            finally:
                checkpoints.remember(workspace, app.name)
        code = 0
    except MillraceError as error:
        print(error.render(), file=sys.stderr, flush=True)
    except OSError as error:
        full = disk_full_on_write(error, workspace)
        if full is None:
            raise
        print(full.render(), file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        code = 130
    finally:
        registry.record_exit(workspace, run.app, code)
    sys.exit(code)


def _say(log: Path, settings: Settings, line: str) -> None:
    """Print `line` to the app's log, which is this process's output, and rotate it if large."""
    print(line, flush=True)
    rotate_if_large(log, settings)


if __name__ == "__main__":
    main()
