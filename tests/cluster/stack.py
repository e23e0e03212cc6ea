"""The application processes of one cluster scenario, each on its host.

:class:`ClusterStack` is the chaos suite's :class:`~tests.chaos.stack.ChaosStack` (same
database per scenario, project, recorder, worker handles, short timings, stop-everything)
with every process placed on a host of :class:`~tests.cluster.network.Network`: gunicorn on
``web`` (bound to its address, port 8000), Celery workers ``w1`` and ``w2`` on the hosts of
those names, a maintenance worker and beat on ``ops`` (and on ``ops2`` with two ops hosts).
PostgreSQL and Redis run on ``db``; the recorder and every :class:`FaultProxy` run in the
test process, bound to the bridge address, where each host reaches them.

A process's connections to one peer can go through a proxy of their own
(:meth:`ClusterStack.links`), to slow them down or cut that host from that peer only;
taking a host's link down (``stack.network["w1"].down()``) cuts it from everyone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.chaos import workflows
from tests.chaos.stack import ChaosStack, Worker
from tests.cluster.network import Network
from tests.support.netproxy import FaultProxy
from tests.support.processes import BIN, listening, wait_until

WEB_PORT = 8000


@dataclass
class Links:
    """One process's connections to some peers, each through its own :class:`FaultProxy`:
    ``env`` points the process at the proxies; the methods act on all of them."""

    proxies: dict[str, FaultProxy] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, peer: str) -> FaultProxy:
        return self.proxies[peer]

    def partition(self) -> None:
        for proxy in self.proxies.values():
            proxy.partition()

    def stall(self) -> None:
        for proxy in self.proxies.values():
            proxy.stall()

    def delay(self, mean: float, jitter: float = 0.0) -> None:
        for proxy in self.proxies.values():
            proxy.delay(mean, jitter)

    def heal(self, reset: bool = False) -> None:
        for proxy in self.proxies.values():
            proxy.heal(reset=reset)


class ClusterStack(ChaosStack):
    """Made by the ``cluster`` fixture; :meth:`start` launches the processes on their hosts.

    ``timings``: ``AWOOOP_*`` settings that replace the chaos suite's short ones (e.g. the
    default lease and heartbeat) or the stack's own; ``broker_url``: another broker
    (RabbitMQ, a Sentinel group) than the Redis on ``db`` — the rate limiter stays on that
    Redis unless ``timings`` sets ``AWOOOP_RATE_LIMIT_REDIS_URL``.
    """

    def __init__(
        self,
        *,
        network: Network,
        timings: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.network = network
        super().__init__(**kwargs)
        if self.broker_url != self.services.redis.url:
            self.env["AWOOOP_RATE_LIMIT_REDIS_URL"] = self.services.redis.url
        self.env.update(timings or {})

    # --- proxied links -----------------------------------------------------------------

    def links(self, *peers: str) -> Links:
        """New proxies for a process's connections to ``peers`` (``database``, ``redis``,
        ``broker``, ``recorder``), and the environment that routes them through. Pass
        ``links.env`` to :meth:`start` (``env={"w1": links.env}``)."""
        links = Links()
        urls = {
            "database": ["AWOOOP_DATABASE_URL"],
            "redis": ["AWOOOP_RATE_LIMIT_REDIS_URL"],
            "broker": ["AWOOOP_BROKER_URL"],
            "recorder": [workflows.RECORDER_ENV],
        }
        if self.broker_url == self.services.redis.url:  # one Redis: both are its peer
            urls["redis"].append("AWOOOP_BROKER_URL")
            urls["broker"] = urls["redis"]
        for peer in peers:
            names = urls[peer]
            url = self.env.get(names[0]) or self.services.redis.url
            host, port = _host_port(url)
            proxy = FaultProxy(
                host, port, listen_host=self.network.bridge_address, name=f"proxy-{peer}"
            )
            self.proxies.append(proxy)
            links.proxies[peer] = proxy
            for name in names:
                current = self.env.get(name) or url
                links.env[name] = current.replace(f"{host}:{port}", f"{proxy.host}:{proxy.port}")
        return links

    # --- starting ----------------------------------------------------------------------

    def start(  # placement by host, not ChaosStack's options
        self,
        workers: tuple[str, ...] = ("w1", "w2"),
        concurrency: int = 2,
        ops_hosts: tuple[str, ...] = ("ops",),
        web: bool = True,
        env: dict[str, dict[str, str]] | None = None,
    ) -> ClusterStack:
        """Start every process on its host, then wait until each is ready. ``env``: extra
        variables per process (``w1``, ``web``, ``maintenance-ops``, ``beat-ops``, …)."""
        env = env or {}
        for name in workers:
            self.workers[name] = Worker(
                self,
                name,
                "runs,notifications",
                concurrency,
                host=self.network[name],
                env=env.get(name),
            )
        for ops in ops_hosts:
            name = f"maintenance-{ops}"
            self.workers[name] = Worker(
                self, name, "maintenance", 1, host=self.network[ops], env=env.get(name)
            )
        for worker in self.workers.values():
            worker.spawn()
        for ops in ops_hosts:
            name = f"beat-{ops}"
            beat_env = {
                **self.env,
                "AWOOOP_BEAT_SCHEDULE_FILE": str(self.log_dir / f"celerybeat-schedule-{ops}"),
                **env.get(name, {}),
            }
            argv = [str(BIN / "celery"), "-A", "awooop.tasks.app", "beat", "--loglevel", "INFO"]
            self.beats.append(self._start(name, argv, beat_env, self.network[ops]))
        if web:
            host = self.network["web"]
            argv = [
                str(BIN / "gunicorn"),
                "-c",
                "gunicorn.conf.py",
                "--bind",
                f"{host.address}:{WEB_PORT}",
                "awooop.web.app:create_app()",
            ]
            self.web = self._start("web", argv, {**self.env, **env.get("web", {})}, host)
            self.web_url = f"http://{host.address}:{WEB_PORT}"
        for worker in self.workers.values():
            worker.wait_ready()
        for beat_process in self.beats:
            beat_process.wait_for_log("beat: Starting", 60)
        if web:
            address = self.network["web"].address
            wait_until(lambda: listening(WEB_PORT, address), 60, "the web server")
        return self

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            for host in self.network.hosts.values():
                if host.is_down:
                    host.up()


def _host_port(url: str) -> tuple[str, int]:
    """``host`` and ``port`` of a URL like ``scheme://user@host:port/path``."""
    netloc = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, port = netloc.rsplit(":", 1)
    return host, int(port)
