"""The secured bus of the bus tests: a workspace whose local broker listens on SASL_SSL only.

`secured_bus` starts, once per test module that uses it, a broker of its own (free ports, a
workspace of its own) whose only client listener is SASL_SSL with a SCRAM-SHA-512 user; its
password is read from a file, as a production setup keeps it (`tests.secured_workspace`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from millrace.bus.broker import start_broker, stop_broker
from millrace.config.workspace import Workspace, init_workspace
from tests.ports import free_port
from tests.secured_workspace import SecuredWorkspace


@pytest.fixture(scope="module")
def secured_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredWorkspace]:
    """A broker listening on SASL_SSL only (SCRAM-SHA-512, password in a file), in a workspace
    of its own; stopped when the module's tests are done."""
    root = tmp_path_factory.mktemp("secured")
    password = f"pw-{uuid.uuid4().hex}"
    password_file = root / "kafka-password"
    password_file.write_text(password + "\n")
    environment = {
        "MILLRACE_HOME": str(root / "workspace"),
        "MILLRACE_KAFKA": "",
        "MILLRACE_KAFKA_PORT": str(free_port()),
        "MILLRACE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "MILLRACE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MILLRACE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "MILLRACE_KAFKA_USER": "millrace",
        "MILLRACE_KAFKA_PASSWORD": "",
        "MILLRACE_KAFKA_PASSWORD_FILE": str(password_file),
        "MILLRACE_REDIS": "",
        "MILLRACE_REDIS_PORT": str(free_port()),
        "MILLRACE_SPARK_MASTER": "local[2]",
        "MILLRACE_SPARK_SHUFFLE_PARTITIONS": "2",
    }
    workspace = Workspace.locate({**os.environ, **environment})
    init_workspace(workspace)
    start_broker(workspace)
    yield SecuredWorkspace(workspace, environment, password)
    stop_broker(workspace)
