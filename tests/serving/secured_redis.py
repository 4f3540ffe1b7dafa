"""The password-protected Redis of the serving tests: millrace's local Redis with an ACL user.

`secured_redis` starts, once per test module that uses it, a workspace of its own whose local
Redis (`millrace up`'s) lets in only the ACL user `feeder`, whose password is read from a file;
its streams are the suite's broker's (`tests.secured_workspace`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from millrace.config.workspace import Workspace, init_workspace
from millrace.serving.server import start_redis, stop_redis
from tests.ports import free_port
from tests.secured_workspace import SecuredWorkspace


@pytest.fixture(scope="module")
def secured_redis(
    tmp_path_factory: pytest.TempPathFactory, workspace: Workspace
) -> Iterator[SecuredWorkspace]:
    """A local Redis that only ACL user `feeder` may use (password in a file), in a workspace of
    its own on the suite's broker; stopped when the module's tests are done."""
    root = tmp_path_factory.mktemp("secured-redis")
    password = f"pw-{uuid.uuid4().hex}"
    password_file = root / "redis-password"
    password_file.write_text(password + "\n")
    environment = {
        "MILLRACE_HOME": str(root / "workspace"),
        "MILLRACE_KAFKA": workspace.settings.bootstrap_servers,
        "MILLRACE_REDIS": "",
        "MILLRACE_REDIS_PORT": str(free_port()),
        "MILLRACE_REDIS_USER": "feeder",
        "MILLRACE_REDIS_PASSWORD": "",
        "MILLRACE_REDIS_PASSWORD_FILE": str(password_file),
        "MILLRACE_SPARK_MASTER": "local[2]",
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "2",
    }
    secured = Workspace.locate({**os.environ, **environment})
    init_workspace(secured)
    start_redis(secured)
    yield SecuredWorkspace(secured, environment, password)
    stop_redis(secured)
