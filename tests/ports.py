"""Free TCP ports on loopback, for the brokers, Redis servers and services the tests start.

A port the kernel picks (a bind to port 0) is free when picked, but the kernel may pick it
again, for another bind or as a client connection's own end, before the server the test
starts listens on it: the demo's dashboard and its broker were once given the same one.
So ports come from below the kernel's ephemeral range (`ip_local_port_range`, from 32768
on Linux), where it never picks one by itself, each process of the run (the test process,
or each pytest-xdist worker) from a block of its own, in order, skipping those in use: a
port is handed out once per run.
"""

import os
import socket

_FIRST_PORT = 20_000
# Room for the test process and three workers below 32768; a run uses a few hundred ports.
_BLOCK = 3_000


def _block() -> range:
    """This process's ports: the test process's first, then one block per xdist worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker.removeprefix("gw")) + 1 if worker.startswith("gw") else 0
    start = _FIRST_PORT + index * _BLOCK
    return range(start, start + _BLOCK)


_PORTS = iter(_block())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now and no other test was given."""
    for port in _PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port left in {_block()} for this test process")
