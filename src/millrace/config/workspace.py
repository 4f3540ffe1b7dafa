"""The workspace: the one folder that holds a millrace installation's settings and data.

It is `.millrace/` in the working directory, or the folder `MILLRACE_HOME` names. Inside:
`millrace.toml`, the local broker's data and logs under `kafka/`, Spark checkpoints under
`checkpoints/<app>/`, SQL apps' result tables under `tables/<app>/`, and logs under `logs/`.
Checkpoints, result tables and the warehouse move to the storage root when `storage.root`
names one (`millrace.config.storage`).
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from millrace.config.settings import SETTINGS, Settings, load_settings
from millrace.config.storage import StoragePath, storage_root
from millrace.errors import ConfigError

CONFIG_FILE_NAME = "millrace.toml"


@dataclass(frozen=True)
class Workspace:
    """A workspace folder and the settings in force for it.

    Example:
        >>> workspace = Workspace.locate({"MILLRACE_HOME": "/tmp/demo-workspace"})
        >>> workspace.config_file
        PosixPath('/tmp/demo-workspace/millrace.toml')
    """

    root: Path
    settings: Settings = field(default_factory=Settings)

    @classmethod
    def locate(cls, environ: Mapping[str, str] | None = None) -> Workspace:
        """The workspace that `MILLRACE_HOME` names, or `.millrace/` in the working directory."""
        environ = os.environ if environ is None else environ
        root = Path(environ.get("MILLRACE_HOME") or Path.cwd() / ".millrace").absolute()
        return cls(root, load_settings(root / CONFIG_FILE_NAME, environ))

    @property
    def config_file(self) -> Path:
        """The workspace's `millrace.toml`."""
        return self.root / CONFIG_FILE_NAME

    @property
    def kafka_dir(self) -> Path:
        """Data, configuration and logs of the local Kafka broker."""
        return self.root / "kafka"

    @property
    def redis_dir(self) -> Path:
        """Data, configuration and log of the local Redis that serves the serving tables."""
        return self.root / "redis"

    @property
    def checkpoints_dir(self) -> StoragePath:
        """Spark checkpoints, one folder per app and one below it per query."""
        return self.storage / "checkpoints"

    @property
    def storage(self) -> StoragePath:
        """The root of checkpoints, result tables and the warehouse (`millrace.config.storage`).

        It is `storage.root`, or this folder when that is empty.
        """
        return storage_root(self.root, self.settings)

    @property
    def logs_dir(self) -> Path:
        """Logs of the processes that millrace starts."""
        return self.root / "logs"

    @property
    def tables_dir(self) -> StoragePath:
        """Result tables of SQL apps, as Delta tables: `tables/<app>/<table>`."""
        return self.storage / "tables"

    def checkpoint(self, app: str, query: str) -> StoragePath:
        """The checkpoint folder of one streaming query of one app."""
        return self.checkpoints_dir / app / query

    def require_initialized(self) -> Workspace:
        """This workspace; `ConfigError` when `millrace init` has not been run for it."""
        if not self.config_file.exists():
            raise ConfigError(
                f"no workspace at {self.root} ({CONFIG_FILE_NAME} is missing)",
                hint="run `millrace init` here, or set MILLRACE_HOME to an existing workspace",
            )
        return self


def init_workspace(workspace: Workspace, *, force: bool = False) -> bool:
    """Create the workspace folders and a commented `millrace.toml`.

    Returns True when it wrote the file, False when one was there already and `force` is off;
    folders are always created, so running it twice is safe.

    Example:
        >>> init_workspace(Workspace.locate({"MILLRACE_HOME": str(tmp_path)}))
        True
    """
    for folder in (
        workspace.root,
        workspace.kafka_dir,
        workspace.checkpoints_dir,
        workspace.logs_dir,
    ):
        folder.mkdir(parents=True, exist_ok=True)
    if workspace.config_file.exists() and not force:
        return False
    workspace.config_file.write_text(commented_config(), encoding="utf-8")
    return True


def commented_config() -> str:
    """The text of a fresh `millrace.toml`: every setting, commented out, with its default."""
    lines = [
        "# millrace workspace settings.",
        "# Every setting is shown commented out with its default value: uncomment to change it.",
        "# An environment variable, named after each setting, wins over this file.",
    ]
    section = None
    for setting in SETTINGS:
        table, name = setting.key.split(".", 1)
        if table != section:
            lines += ["", f"[{table}]"]
            section = table
        lines += textwrap.wrap(setting.doc, width=96, initial_indent="# ", subsequent_indent="# ")
        lines += [f"# (environment: {setting.env})", f"# {name} = {json.dumps(setting.default)}"]
    return "\n".join(lines) + "\n"
