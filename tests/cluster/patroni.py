"""A PostgreSQL cluster managed by Patroni, on hosts of its own: etcd on ``etcd``, one
Patroni member (and its PostgreSQL) on ``pg1`` and on ``pg2``.

:class:`PatroniCluster` starts etcd, then ``pg1`` (which bootstraps the cluster and takes
the leader key) and ``pg2`` (which clones it and follows), and waits until there is a leader
and a standby streaming from it — with ``synchronous_mode``, a standby the leader waits for
(``sync_state = 'sync'``). Short timings (:data:`DCS_TIMINGS`: a leader key of 10 s, a loop
every second) make a failover take seconds. It offers the faults of the scenarios:

- :meth:`kill_host`: SIGKILL every process on a member's host (Patroni and PostgreSQL: the
  machine is gone); the other member is promoted once the leader key expires;
- :meth:`isolate`: the host's link goes down (its packets vanish, its clients' connections
  hang); its Patroni cannot renew the leader key and demotes its PostgreSQL;
- :meth:`switchover`: ``patronictl switchover``, what an operator types;
- :meth:`cut_replication` (with ``cuttable_replication``): the standby receives no more
  WAL while both members stay reachable for everyone else. This kernel has no ``netem`` and
  no packet filter, so each member's replication address (Patroni's ``connect_address``,
  which the standby streams from) is a :class:`~tests.support.netproxy.FaultProxy` on the
  bridge in front of its PostgreSQL, and the cut is that proxy's partition.

Clients reach the leader through a libpq multi-host URL with
``target_session_attrs=read-write`` (:meth:`url`): libpq tries each member and keeps the one
that accepts writes. PostgreSQL runs as the unprivileged user of :mod:`awooop.devstack`;
everything lives under one temporary directory (``prefix``: the suite's, so the stale
cleanup of a killed run removes it), removed by :meth:`stop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, cast

from sqlalchemy import create_engine, text

from awooop import devstack
from tests.chaos.services import PG_USER, Redis, Services, pg_bin
from tests.cluster.network import Host, Network, kill_netns_processes
from tests.support.netproxy import FaultProxy
from tests.support.processes import Process, listening, wait_until

MEMBERS = ("pg1", "pg2")
ETCD_HOST = "etcd"
PG_PORT = 5432
API_PORT = 8008
ETCD_PORT = 2379
# ttl >= loop_wait + 2 * retry_timeout (Patroni's rule): the leader key expires 10 s after
# the leader's last renewal; a leader that cannot reach etcd for 4 s demotes itself.
DCS_TIMINGS = {"ttl": 10, "loop_wait": 1, "retry_timeout": 4}


def unavailable() -> str | None:
    """Why Patroni cannot run here (its programs or etcd are missing), or None."""
    for program in ("patroni", "patronictl", "etcd"):
        if shutil.which(program) is None:
            return (
                f"{program} is not installed: run `make patroni`"
                " (apt-get install patroni etcd-server)"
            )
    return None


def _get_json(url: str, timeout: float = 2.0) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}


class PatroniCluster:
    """etcd and two Patroni members on their hosts of ``network``; :meth:`start`, :meth:`stop`.

    ``synchronous``: Patroni's ``synchronous_mode`` (the leader's commits wait for the
    standby, and only that standby may be promoted); without it replication is asynchronous
    and a standby up to ``maximum_lag_on_failover`` (1 GiB here) behind may be promoted.
    ``cuttable_replication``: replication goes through a proxy per member (see above).
    """

    def __init__(
        self,
        network: Network,
        prefix: str,
        log_dir: Path,
        *,
        synchronous: bool = True,
        cuttable_replication: bool = False,
    ) -> None:
        self.network = network
        self.synchronous = synchronous
        self.proxies: dict[str, FaultProxy] = {}
        if cuttable_replication:
            for member in MEMBERS:
                self.proxies[member] = FaultProxy(
                    network[member].address,
                    PG_PORT,
                    listen_host=network.bridge_address,
                    name=f"replication-{member}",
                )
        self.scope = f"awc{network.owner}"
        self.root = Path(tempfile.mkdtemp(prefix=prefix + "patroni-"))
        self.root.chmod(0o755)  # PostgreSQL's user reaches its own directory below
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.user = devstack._pg_user()  # None unless root
        self.processes: dict[str, Process] = {}
        self._etcd: Process | None = None

    # --- addresses -----------------------------------------------------------------------

    def host(self, member: str) -> Host:
        return self.network[member]

    @property
    def etcd_url(self) -> str:
        return f"http://{self.network[ETCD_HOST].address}:{ETCD_PORT}"

    def url(self, database: str) -> str:
        """The libpq multi-host URL of ``database``: whichever member accepts writes."""
        hosts = "&".join(f"host={self.host(m).address}:{PG_PORT}" for m in MEMBERS)
        return (
            f"postgresql+psycopg2://{PG_USER}@/{database}?{hosts}&target_session_attrs=read-write"
        )

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def member_url(self, member: str, database: str = "postgres") -> str:
        """One member only (read-only or not)."""
        return f"postgresql+psycopg2://{PG_USER}@{self.host(member).address}:{PG_PORT}/{database}"

    # --- starting ------------------------------------------------------------------------

    def start(self) -> PatroniCluster:
        self._start_etcd()
        self._start_member(MEMBERS[0])
        self.wait_leader(MEMBERS[0], 90)
        self._start_member(MEMBERS[1])
        self.wait_replicating(MEMBERS[0], MEMBERS[1], 120)
        return self

    def _start_etcd(self) -> None:
        host = self.network[ETCD_HOST]
        data = self.root / "etcd"
        argv = [
            "etcd",
            "--name", "etcd",
            "--data-dir", str(data),
            "--listen-client-urls", f"http://{host.address}:{ETCD_PORT}",
            "--advertise-client-urls", f"http://{host.address}:{ETCD_PORT}",
            "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "etcd=http://127.0.0.1:2380",
            "--initial-cluster-state", "new",
        ]  # fmt: skip
        self._etcd = Process("etcd", host.argv(argv), dict(os.environ), self.log_dir)
        wait_until(lambda: listening(ETCD_PORT, host.address), 30, "etcd to listen")

    def _config(self, member: str) -> dict[str, Any]:
        host = self.host(member)
        home = self.root / member
        subnet = str(self.network.subnet)
        proxy = self.proxies.get(member)
        replication_address = f"{proxy.host}:{proxy.port}" if proxy else f"{host.address}:{PG_PORT}"
        return {
            "scope": self.scope,
            "name": member,
            "restapi": {
                "listen": f"{host.address}:{API_PORT}",
                "connect_address": f"{host.address}:{API_PORT}",
            },
            "etcd3": {"host": f"{self.network[ETCD_HOST].address}:{ETCD_PORT}"},
            "bootstrap": {
                "dcs": {
                    **DCS_TIMINGS,
                    "synchronous_mode": self.synchronous,
                    "maximum_lag_on_failover": 1 << 30,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "max_connections": 300,
                            "wal_log_hints": "on",
                            "max_wal_senders": 5,
                            "max_replication_slots": 5,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            },
            "postgresql": {
                "listen": f"{host.address}:{PG_PORT}",
                "connect_address": replication_address,
                "data_dir": str(home / "data"),
                "bin_dir": str(pg_bin("postgres").parent),
                "pgpass": str(home / "pgpass"),
                "authentication": {
                    "superuser": {"username": PG_USER},
                    "replication": {"username": PG_USER},
                    "rewind": {"username": PG_USER},
                },
                "parameters": {
                    "unix_socket_directories": str(home),
                    "fsync": "on",
                    "synchronous_commit": "on",
                    "shared_buffers": "128MB",
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    f"host all all {subnet} trust",
                    f"host replication all {subnet} trust",
                ],
            },
            "tags": {"nofailover": False, "noloadbalance": False},
        }

    def config_path(self, member: str) -> Path:
        return self.root / member / "patroni.yml"

    def _start_member(self, member: str) -> None:
        home = self.root / member
        home.mkdir(exist_ok=True)
        # JSON is YAML: the file Patroni (and patronictl) read.
        self.config_path(member).write_text(json.dumps(self._config(member), indent=1))
        argv = ["patroni", str(self.config_path(member))]
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
            argv = [
                "setpriv",
                f"--reuid={self.user}",
                f"--regid={self.user}",
                "--clear-groups",
                *argv,
            ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "AWOOOP_"))}
        env["HOME"] = str(home)
        name = f"patroni-{member}"
        self.processes[name] = Process(name, self.host(member).argv(argv), env, self.log_dir)

    # --- what the cluster says -----------------------------------------------------------

    def status(self, member: str) -> dict[str, Any] | None:
        """The member's own view (Patroni's REST ``GET /patroni``), None when it does not answer."""
        if self.host(member).is_down:
            return None
        try:
            _code, body = _get_json(f"http://{self.host(member).address}:{API_PORT}/patroni")
        except OSError:
            return None
        return body

    def leader(self) -> str | None:
        """The member that holds the leader key and runs as a primary, from the members'
        answers (None: no one, e.g. during a failover)."""
        for member in MEMBERS:
            state = self.status(member)
            if (
                state
                and state.get("role") in ("master", "primary")
                and state.get("state") == "running"
            ):
                return member
        return None

    def wait_leader(self, member: str | None = None, timeout: float = 60) -> str:
        """Wait until ``member`` (or any member but none in particular) is the leader."""
        found: list[str] = []

        def ready() -> bool:
            leader = self.leader()
            if (
                leader is not None
                and (member is None or leader == member)
                and self._writable(leader)
            ):
                found.append(leader)
                return True
            return False

        wait_until(ready, timeout, f"{member or 'a member'} to lead and accept writes")
        return found[0]

    def _writable(self, member: str) -> bool:
        engine = create_engine(self.member_url(member), connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as conn:
                return not conn.execute(text("SELECT pg_is_in_recovery()")).scalar_one()
        except Exception:  # noqa: BLE001 - not up yet
            return False
        finally:
            engine.dispose()

    def replication(self, leader: str) -> list[dict[str, Any]]:
        """``pg_stat_replication`` on ``leader``: each standby's state and sync state."""
        engine = create_engine(self.member_url(leader), connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as conn:
                return [
                    dict(r)
                    for r in conn.execute(
                        text(
                            "SELECT application_name, state, sync_state, replay_lsn::text"
                            " FROM pg_stat_replication"
                        )
                    ).mappings()
                ]
        finally:
            engine.dispose()

    def wait_replicating(self, leader: str, standby: str, timeout: float = 120) -> None:
        """Wait until ``standby`` streams from ``leader`` — as its synchronous standby when
        the cluster is synchronous."""
        wanted = "sync" if self.synchronous else "async"

        def ready() -> bool:
            try:
                rows = self.replication(leader)
            except Exception:  # noqa: BLE001 - the leader restarting
                return False
            streaming = any(
                r["application_name"] == standby
                and r["state"] == "streaming"
                and r["sync_state"] == wanted
                for r in rows
            )
            # Patroni names the synchronous standby in etcd (the only member it may
            # promote) after PostgreSQL already waits for it.
            return streaming and (not self.synchronous or self.sync_standby() == standby)

        wait_until(ready, timeout, f"{standby} to stream from {leader} ({wanted})")

    def sync_standby(self) -> str | None:
        """The member etcd names the synchronous standby (Patroni's ``GET /cluster``)."""
        for member in MEMBERS:
            if self.host(member).is_down:
                continue
            try:
                _code, body = _get_json(f"http://{self.host(member).address}:{API_PORT}/cluster")
            except OSError:
                continue
            for entry in body.get("members", []):
                if entry.get("role") == "sync_standby":
                    return str(entry["name"])
            return None
        return None

    # --- faults --------------------------------------------------------------------------

    def kill_host(self, member: str) -> None:
        """SIGKILL Patroni and PostgreSQL on ``member``'s host at once."""
        kill_netns_processes(self.host(member).netns)
        process = self.processes.get(f"patroni-{member}")
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=10)

    def isolate(self, member: str) -> None:
        self.host(member).down()

    def rejoin(self, member: str) -> None:
        self.host(member).up()

    def switchover(self, leader: str, candidate: str) -> subprocess.CompletedProcess[str]:
        """``patronictl switchover --leader … --candidate … --force`` (an operator's request);
        returns when Patroni says it is done (or failed)."""
        return subprocess.run(
            [
                "patronictl",
                "-c",
                str(self.config_path(leader)),
                "switchover",
                self.scope,
                "--leader",
                leader,
                "--candidate",
                candidate,
                "--force",
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def cut_replication(self) -> None:
        """Forward nothing more to or from either member's replication address (nothing is
        closed): the standby receives no more WAL; both still reach etcd and their clients."""
        assert self.proxies, "made without cuttable_replication"
        for proxy in self.proxies.values():
            proxy.partition()

    def receive_lsn(self, standby: str) -> str:
        engine = create_engine(self.member_url(standby), connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as conn:
                return str(
                    conn.execute(text("SELECT pg_last_wal_receive_lsn()::text")).scalar_one()
                )
        finally:
            engine.dispose()

    # --- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process this cluster started (SIGKILL: its data is thrown away) and
        remove its directory."""
        for member in MEMBERS:
            if self.host(member).is_down:
                self.host(member).up()
        for member in MEMBERS:
            kill_netns_processes(self.host(member).netns)
        if self._etcd is not None:
            kill_netns_processes(self.network[ETCD_HOST].netns)
        for process in [*self.processes.values(), *([self._etcd] if self._etcd else [])]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=10)
            process.stop()
        for proxy in self.proxies.values():
            proxy.close()
        shutil.rmtree(self.root, ignore_errors=True)


class PatroniServices:
    """What a :class:`~tests.chaos.stack.ChaosStack` needs of its services, with
    PostgreSQL being the Patroni cluster (its multi-host URL) and Redis the suite's."""

    def __init__(self, postgres: PatroniCluster, redis: Redis) -> None:
        self.postgres = postgres
        self.redis = redis

    def create_template(self, name: str) -> None:
        """The migrated template, as :meth:`Services.create_template` makes it, on the leader."""
        Services.create_template(cast(Services, self), name)
