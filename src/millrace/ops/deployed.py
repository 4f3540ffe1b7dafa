"""The process of a deployed app: its driver, started by `deploy`, detached from any terminal.

`millrace.ops.lifecycle` starts it as

    python -m millrace.ops.deployed --workspace ROOT --app NAME --trigger T
        [--master URL] [--force] SOURCE

in a process group of its own, its output appended to `<workspace>/apps/<app>/app.log`,
handing it the app's driver lock (`millrace.ops.driver_lock`). It runs the app as `millrace
run` does (`millrace.apps.runner.stream`), saying its progress to the log, and records in
the registry how it ended (`millrace.ops.registry.record_exit`), which `ps` and the demo
read: 0 once stopped or at the end of its input, else 1 (130 when interrupted). A millrace
error is written to the log as the CLI prints it (`error[code]: ...`), without a traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence

from millrace.apps.runner import on_master, stream
from millrace.config.workspace import Workspace
from millrace.engine.disk_full import disk_full_on_write
from millrace.engine.triggers import Trigger
from millrace.errors import MillraceError
from millrace.ops import registry
from millrace.ops.lifecycle import DEPLOYED_MODULE, load_streamable


def main(arguments: Sequence[str] | None = None) -> None:
    """Run the deployed app the command line names, and record how it ended; exit with that."""
    parser = argparse.ArgumentParser(prog=f"python -m {DEPLOYED_MODULE}", description=__doc__)
    parser.add_argument("--workspace", required=True, help="The workspace's folder.")
    parser.add_argument("--app", required=True, help="The app's name, for its registry record.")
    parser.add_argument("--trigger", required=True, help="As `millrace run --trigger` takes it.")
    parser.add_argument("--master", help="The Spark master URL, if not the workspace's.")
    parser.add_argument("--force", action="store_true", help="Skip the state schema check.")
    parser.add_argument("source", help="The app's source, as `millrace run` takes it.")
    options = parser.parse_args(arguments)
    # The environment still sets the settings (MILLRACE_SPARK_*, as the demo does).
    workspace = Workspace.locate({**os.environ, "MILLRACE_HOME": options.workspace})
    code = 1
    try:
        stream(
            on_master(workspace.require_initialized(), options.master),
            load_streamable(options.source),
            trigger=Trigger.parse(options.trigger),
            force=options.force,
            say=functools.partial(print, flush=True),
        )
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
        registry.record_exit(workspace, options.app, code)
    sys.exit(code)


if __name__ == "__main__":
    main()
