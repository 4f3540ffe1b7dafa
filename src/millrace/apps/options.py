"""How an app's driver runs: the options `run`, `deploy`, the deployed driver and the demo share.

`RunOptions` is built once, from the command line (`millrace run`, `deploy`, `restart`) or by
the demo, checked as it is built (a trigger that does not parse is refused there), and handed
on as it is: the registry keeps it with a deployed app (`millrace.ops.registry.AppRecord`), so
that `restart` and `rollback` start the app again as it ran, and `deploy` hands it to the
process it starts (`millrace.ops.deployed`) as JSON that `from_json` reads back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.engine.triggers import Trigger
from millrace.errors import ConfigError


@dataclass(frozen=True)
class RunOptions:
    """When an app's micro-batches run, on which Spark master, and whether its state is checked.

    `master` replaces the workspace's Spark master when given (`--master`); `force` starts
    the app without comparing its state's fingerprint with its checkpoint's (`--force`);
    `hosted` runs a deployed app in the workspace's host, one Spark application for many
    apps (`millrace.ops.host`; what `deploy` does unless `--isolated` or the `deploy.isolated`
    setting says otherwise), rather than in a driver of its own.

    Example:
        >>> options = RunOptions(Trigger.parse("interval:10s"), master="spark://127.0.0.1:7077")
        >>> RunOptions.from_json(options.to_json()) == options
        True
    """

    trigger: Trigger = field(default_factory=Trigger)
    master: str | None = None
    force: bool = False
    hosted: bool = False

    def on_master(self, workspace: Workspace) -> Workspace:
        """`workspace` with its Spark master replaced by `master`, when one is given.

        Example:
            >>> workspace = Workspace.locate({"MILLRACE_HOME": str(tmp_path)})
            >>> RunOptions(master="spark://127.0.0.1:7077").on_master(workspace).settings.spark_master
            'spark://127.0.0.1:7077'
        """
        if self.master is None:
            return workspace
        settings = dataclasses.replace(workspace.settings, spark_master=self.master)
        return dataclasses.replace(workspace, settings=settings)

    def for_app(self, app: str, settings: Settings) -> RunOptions:
        """These options for deployed app `app`: a driver of its own if `deploy.isolated` names it.

        Example:
            >>> hosted = RunOptions(hosted=True)
            >>> hosted.for_app("ranker", Settings(deploy_isolated="ranker")).hosted
            False
            >>> hosted.for_app("scorer", Settings(deploy_isolated="ranker")).hosted
            True
        """
        if self.hosted and app in {name.strip() for name in settings.deploy_isolated.split(",")}:
            return dataclasses.replace(self, hosted=False)
        return self

    def to_json(self) -> dict[str, str | bool | None]:
        """The options as JSON-able data, as the registry keeps them."""
        return {
            "trigger": str(self.trigger),
            "master": self.master,
            "force": self.force,
            "hosted": self.hosted,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunOptions:
        """The options `to_json` wrote; `ConfigError` naming what is not as it writes it.

        A registry record written by an older millrace may lack any of them: each then takes
        its default.
        """
        trigger, master, force = data.get("trigger"), data.get("master"), data.get("force")
        if not isinstance(trigger, str | None) or not isinstance(master, str | None):
            raise ConfigError(
                f"run options {dict(data)!r} hold a trigger or master that is not text",
                hint="deploy the app again: `millrace deploy APP`",
            )
        return cls(
            trigger=Trigger.parse(trigger) if trigger else Trigger(),
            master=master or None,
            force=force is True,
            hosted=data.get("hosted") is True,
        )
