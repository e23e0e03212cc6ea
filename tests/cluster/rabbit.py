"""RabbitMQ for the cluster's hosts: the machine's own server, reached through the bridge.

The machine runs RabbitMQ on 127.0.0.1:5672, where no namespace host can reach it, and its
``guest`` user may only log in from loopback. :class:`Rabbit` puts a
:class:`~tests.support.netproxy.FaultProxy` on the bridge address in front of it (the
hosts' broker URL points there; the proxy connects from loopback) and gives each scenario a
virtual host of its own (``awooop-cluster-<pid>-<n>``, made and deleted with ``rabbitmqctl``),
so nothing of another user of that server is touched. :func:`remove_stale` deletes the
virtual hosts of earlier runs whose process is gone.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess

from tests.cluster import network
from tests.support.netproxy import FaultProxy
from tests.support.processes import listening

PORT = 5672
_PREFIX = "awooop-cluster-"


def rabbitmqctl(*args: str) -> str:
    result = subprocess.run(
        ["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60
    )
    return result.stdout


def unavailable() -> str | None:
    """Why the scenarios on RabbitMQ cannot run here, or None."""
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed"
    if not listening(PORT):
        return f"no RabbitMQ listens on 127.0.0.1:{PORT}"
    try:
        rabbitmqctl("list_vhosts")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"rabbitmqctl cannot reach the server: {exc}"
    return None


def remove_stale() -> list[str]:
    removed = []
    for name in rabbitmqctl("list_vhosts", "name").split():
        match = re.fullmatch(rf"{re.escape(_PREFIX)}(\d+)-\d+", name)
        if match and not network.alive(int(match.group(1))):
            rabbitmqctl("delete_vhost", name)
            removed.append(name)
    return removed


class Rabbit:
    """The proxy on ``bridge_address`` and the virtual hosts of this run."""

    def __init__(self, bridge_address: str) -> None:
        remove_stale()
        self.proxy = FaultProxy("127.0.0.1", PORT, listen_host=bridge_address, name="rabbitmq")
        self._numbers = itertools.count(1)
        self.vhosts: list[str] = []

    def new_vhost(self) -> str:
        """A fresh virtual host ``guest`` may use; its ``amqp://`` URL through the proxy."""
        name = f"{_PREFIX}{os.getpid()}-{next(self._numbers)}"
        rabbitmqctl("add_vhost", name)
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        self.vhosts.append(name)
        return f"amqp://guest:guest@{self.proxy.host}:{self.proxy.port}/{name}"

    def delete_vhost(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        if name in self.vhosts:
            rabbitmqctl("delete_vhost", name)
            self.vhosts.remove(name)

    def close(self) -> None:
        for name in list(self.vhosts):
            rabbitmqctl("delete_vhost", name)
        self.vhosts.clear()
        self.proxy.close()
