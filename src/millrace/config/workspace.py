"""The workspace: the one folder that holds a millrace installation's settings and data.

It is `.millrace/` in the working directory, or the folder `MILLRACE_HOME` names. This module
names every file and folder in it; no other module builds a workspace path. Inside:

- `millrace.toml`, the settings;
- `kafka/` and `redis/`, the local servers' folders (laid out inside by `millrace.bus.broker`
  and `millrace.serving.server`, whose processes own them);
- `apps/<app>/`, the registry of deployed apps: `app.json`, `exit.json`, `app.log`, the
  driver lock (`driver.lock`, `driver.json`), the queries that ran (`checkpoints.json`) and
  checkpoints moved aside (`backups/`);
- `host/`, the host that runs deployed apps in one Spark application (`millrace.ops.host`):
  its lock (`host.lock`), what it is (`host.json`), its log (`host.log`) and the requests the
  CLI leaves it (`inbox/`);
- `logs/`, the logs of the processes millrace starts, and the lines a publish could not send;
- under the storage root (this folder, or `storage.root`, `millrace.config.storage`):
  `checkpoints/<app>/<query>/`, Spark's checkpoints, beside which millrace keeps the state's
  fingerprint, the dead-letter routers' marks and a processor's pending timers;
  `tables/<app>/<table>/`, SQL apps' result tables; `warehouse/<stream>/`, the archives, with
  `warehouse/streams.json`, the streams to archive; and `backups/<app>/` when the root is
  remote.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from millrace.config.settings import SETTINGS, Settings
from millrace.config.settings_loader import LOCAL_BROKER_CA, load_settings
from millrace.config.storage import StoragePath, storage_root
from millrace.errors import ConfigError

CONFIG_FILE_NAME = "millrace.toml"
ARCHIVE_APP = "_archive"
"""The app name the archive jobs' checkpoints are kept under: `checkpoints/_archive/<stream>`."""
DEAD_LETTER_QUERY_PREFIX = "dead-letters."
"""How the folder beside an app's query checkpoints where a stream's dead-letter router keeps
its marks begins: `checkpoints/<app>/dead-letters.<stream>/`."""
DEAD_LETTER_MARKS = "routed.json"
"""The file in a dead-letter router's folder: per bucket, the offset routed up to."""


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

    def kafka_node_dir(self, node: int) -> Path:
        """Data, configuration and logs of node `node` of the local bus (1 is `kafka_dir`)."""
        return self.kafka_dir if node == 1 else self.kafka_dir / f"node-{node}"

    @property
    def local_broker_ca(self) -> Path:
        """The certificate authority of the local broker's TLS, which clients trust."""
        return self.root / LOCAL_BROKER_CA

    @property
    def spark_cluster_dir(self) -> Path:
        """Record, logs and workers' folders of the local Spark standalone cluster."""
        return self.root / "spark"

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

    @property
    def warehouse_dir(self) -> StoragePath:
        """The warehouse: one Delta table per archived stream, `warehouse/<stream>`."""
        return self.storage / "warehouse"

    @property
    def apps_dir(self) -> Path:
        """The registry of deployed apps: a folder per app."""
        return self.root / "apps"

    def app_checkpoints(self, app: str) -> StoragePath:
        """The checkpoint folder of app `app`, holding one folder per streaming query."""
        return self.checkpoints_dir / app

    def checkpoint(self, app: str, query: str) -> StoragePath:
        """The checkpoint folder of one streaming query of one app.

        Example:
            >>> Workspace(Path("/ws")).checkpoint("top_events", "table.per_5min")
            PosixPath('/ws/checkpoints/top_events/table.per_5min')
        """
        return self.app_checkpoints(app) / query

    def state_fingerprint(self, app: str) -> StoragePath:
        """What the state in app `app`'s checkpoint is (`millrace.apps.state_schema`)."""
        return self.app_checkpoints(app) / "millrace-state.json"

    def dead_letter_marks(self, app: str, stream: str) -> StoragePath:
        """Where the dead-letter router of `stream` in app `app` keeps the offsets it routed to."""
        return self.checkpoint(app, DEAD_LETTER_QUERY_PREFIX + stream) / DEAD_LETTER_MARKS

    def at_most_once_marks(self, app: str, query: str) -> StoragePath:
        """The folder of the batch marks of a query of semantics `at_most_once`."""
        return self.checkpoint(app, query) / "at_most_once"

    def pending_timers(self, app: str) -> StoragePath:
        """A processor's earliest pending event-time timer per bucket, beside its checkpoint."""
        return self.checkpoint(app, "processor") / "pending_timers.json"

    def app_tables(self, app: str) -> StoragePath:
        """The folder of app `app`'s result tables."""
        return self.tables_dir / app

    def result_table(self, app: str, table: str) -> StoragePath:
        """The Delta table of result table `table` of app `app`.

        Example:
            >>> Workspace(Path("/ws")).result_table("top_events", "per_5min")
            PosixPath('/ws/tables/top_events/per_5min')
        """
        return self.app_tables(app) / table

    def archive(self, stream: str) -> StoragePath:
        """The Delta table that archives `stream`.

        Example:
            >>> Workspace(Path("/ws")).archive("events_stream")
            PosixPath('/ws/warehouse/events_stream')
        """
        return self.warehouse_dir / stream

    def archive_checkpoint(self, stream: str) -> StoragePath:
        """The checkpoint folder of the archive job of `stream`."""
        return self.checkpoint(ARCHIVE_APP, stream)

    @property
    def archive_marks(self) -> StoragePath:
        """The list of the streams created with `--archive`."""
        return self.warehouse_dir / "streams.json"

    def app_dir(self, app: str) -> Path:
        """The registry folder of app `app`."""
        return self.apps_dir / app

    def app_record(self, app: str) -> Path:
        """The registry record of deployed app `app`."""
        return self.app_dir(app) / "app.json"

    def app_exit(self, app: str) -> Path:
        """How the process of deployed app `app` last ended, written as it ends."""
        return self.app_dir(app) / "exit.json"

    def app_log(self, app: str) -> Path:
        """The output of deployed app `app`'s process."""
        return self.app_dir(app) / "app.log"

    def driver_lock(self, app: str) -> Path:
        """The lock that the driver of app `app` holds for as long as it lives."""
        return self.app_dir(app) / "driver.lock"

    def driver_holder(self, app: str) -> Path:
        """Who holds app `app`'s driver lock, as the holder described itself."""
        return self.app_dir(app) / "driver.json"

    def driver_cpu(self, app: str) -> Path:
        """The CPU that app `app`'s driver used in the last minute, as it keeps recording it."""
        return self.app_dir(app) / "driver_cpu.json"

    @property
    def host_dir(self) -> Path:
        """The folder of the host that runs deployed apps in one Spark application."""
        return self.root / "host"

    @property
    def host_lock(self) -> Path:
        """The lock the host holds for as long as it lives: one host per workspace."""
        return self.host_dir / "host.lock"

    @property
    def host_record(self) -> Path:
        """What the running host is (pid, Spark master, start time), as it described itself."""
        return self.host_dir / "host.json"

    @property
    def host_log(self) -> Path:
        """The host's output: its own lines and Spark's."""
        return self.host_dir / "host.log"

    @property
    def host_inbox(self) -> Path:
        """The requests the CLI leaves the host, a JSON file each."""
        return self.host_dir / "inbox"

    def checkpoint_ledger(self, app: str) -> Path:
        """The queries of app `app` that have committed batches (`millrace.ops.checkpoints`)."""
        return self.app_dir(app) / "checkpoints.json"

    def backups(self, app: str) -> StoragePath:
        """Where app `app`'s checkpoints moved aside go: `apps/<app>/backups/` in the workspace.

        With the checkpoints under a remote storage root, it is `backups/<app>/` there, since
        a move stays on one store.
        """
        if isinstance(self.checkpoints_dir, Path):
            return self.app_dir(app) / "backups"
        return self.storage / "backups" / app

    def failed_lines(self, stream: str, stamp: str) -> Path:
        """The numbers of the lines that a publish to `stream` at `stamp` could not send."""
        return self.logs_dir / f"publish-{stream}-{stamp}.failed-lines"

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
