"""Fixtures of the cluster suite (``make cluster``; not part of the default ``pytest``).

A scenario is a test in ``tests/cluster/`` that uses:

- ``network`` (session): :class:`~tests.cluster.network.Network` — hosts ``db``, ``web``,
  ``w1``, ``w2``, ``ops``, ``ops2``, ``r1``, ``r2``, ``r3`` as network namespaces on one
  bridge (``network["w1"]``: ``.address``, ``.down()`` / ``.up()``). Leftovers of a killed
  earlier run are removed first; everything is removed at the end, also after a failure or
  Ctrl-C / SIGTERM.
- ``cluster_services`` (session): the chaos suite's own PostgreSQL (fsync on) and Redis,
  running on ``db`` at its address (ports 5432 and 6379), and the migrated template.
- ``recorder`` (per test): the chaos suite's recorder, bound to the bridge address.
- ``cluster`` (per test): a :class:`~tests.cluster.stack.ClusterStack` over a fresh
  database and a flushed Redis (project ``chaos`` routed to ``chaos-saga``); call
  ``.start(...)``. Logs under ``.awooop/cluster/logs/<test>/``, tails printed on failure.
- ``redis_sentinels`` (per test): :class:`~tests.support.sentinel.SentinelGroup` — a
  redis-server on each of ``r1`` (the master), ``r2`` and ``r3`` (its replicas), port 6379,
  and a sentinel beside each (port 26379, quorum 2); ``.url`` is the ``sentinel://`` URL.
- ``rabbit`` (session): :class:`~tests.cluster.rabbit.Rabbit`, the machine's RabbitMQ
  reached from the hosts through a proxy on the bridge, a virtual host per scenario.
- ``open_ha_cluster`` (per test): ``open_ha_cluster(synchronous=True,
  cuttable_replication=False)``, a context manager giving ``(patroni, stack)``: a
  :class:`~tests.cluster.patroni.PatroniCluster` of its own (etcd on ``etcd``, members on
  ``pg1`` and ``pg2``, the migrated template on its leader) and a :class:`ClusterStack`
  whose database URL is the cluster's libpq multi-host URL. Needs Patroni and etcd
  (``make patroni``): skipped without them, failed under CI=true.
- ``figures`` (per test): :class:`~tests.chaos.report.Figures` of the ``cluster`` suite:
  printed, appended to ``.awooop/cluster/results.jsonl``, and written into
  ``docs/cluster.md`` when the scenario passed at full size (``AWOOOP_CLUSTER_SCALE`` 1).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos import report, stack
from tests.chaos.recorder import Recorder
from tests.chaos.services import Services
from tests.cluster import network as net
from tests.cluster import patroni
from tests.cluster import rabbit as rabbitmq
from tests.cluster.stack import ClusterStack
from tests.cluster.suite import SUITE
from tests.support import sentinel, suites
from tests.support.processes import ROOT
from tests.support.suites import pytest_runtest_makereport  # noqa: F401 - a hook

IN_CI = os.environ.get("CI") == "true"
TEMPLATE = "cluster_template"
LOGS = ROOT / ".awooop" / "cluster" / "logs"
_TMP_PREFIX = "awooop-cluster-"
_SESSION_RESULTS: list[dict] = []


def pytest_configure(config: pytest.Config) -> None:
    suites.configure(config, "cluster", "a scenario of the cluster suite (make cluster)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    suites.mark(items, "tests/cluster/", "cluster")


def pytest_sessionfinish(session: pytest.Session) -> None:
    suites.write_figures(SUITE, _SESSION_RESULTS)


def _need(reason: str | None) -> None:
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def _remove_stale_tmp() -> None:
    """Data directories of earlier runs whose process is gone."""
    for path in Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*"):
        match = re.match(rf"{_TMP_PREFIX}(\d+)-", path.name)
        if match and not net.alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def network() -> Iterator[net.Network]:
    _need(net.supported())
    _remove_stale_tmp()
    hosts = net.Network()
    try:
        yield hosts.create()
    finally:
        hosts.destroy()


@pytest.fixture(scope="session")
def cluster_services(network: net.Network) -> Iterator[Services]:
    db = network["db"]
    services = Services(
        host=db.address,
        launcher=("ip", "netns", "exec", db.netns),
        prefix=f"{_TMP_PREFIX}{os.getpid()}-",
        clients=str(network.subnet),
    )
    try:
        services.start()
        services.create_template(TEMPLATE)
        yield services
    finally:
        services.stop()


@pytest.fixture(scope="session")
def rabbit(network: net.Network) -> Iterator[rabbitmq.Rabbit]:
    _need(rabbitmq.unavailable())
    server = rabbitmq.Rabbit(network.bridge_address)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_sentinels(network: net.Network) -> Iterator[sentinel.SentinelGroup]:
    root = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-sentinel-"))
    places = [
        sentinel.Place(network[name].address, ("ip", "netns", "exec", network[name].netns))
        for name in ("r1", "r2", "r3")
    ]
    group = sentinel.SentinelGroup(root, places, quorum=2, redis_port=6379, sentinel_port=26379)
    try:
        yield group.start()
    finally:
        group.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def recorder(network: net.Network) -> Iterator[Recorder]:
    recorder = Recorder(host=network.bridge_address)
    yield recorder
    recorder.close()


@pytest.fixture
def open_cluster(
    network: net.Network,
    cluster_services: Services,
    recorder: Recorder,
    request: pytest.FixtureRequest,
):
    """``open_cluster(**options)``: a context manager giving a :class:`ClusterStack` with
    these options (``broker_url``, ``timings``); the ``cluster`` fixture is one with none."""

    def open_cluster(**options) -> contextlib.AbstractContextManager[ClusterStack]:
        return stack.scenario(
            ClusterStack,
            cluster_services,
            TEMPLATE,
            recorder,
            LOGS / request.node.name,
            lambda: suites.failed(request),
            network=network,
            **options,
        )

    return open_cluster


@pytest.fixture
def open_ha_cluster(
    network: net.Network,
    cluster_services: Services,
    recorder: Recorder,
    request: pytest.FixtureRequest,
):
    _need(patroni.unavailable())
    log_dir = LOGS / request.node.name

    @contextlib.contextmanager
    def open_ha_cluster(
        synchronous: bool = True, cuttable_replication: bool = False, **options
    ) -> Iterator[tuple[patroni.PatroniCluster, ClusterStack]]:
        members = patroni.PatroniCluster(
            network,
            f"{_TMP_PREFIX}{os.getpid()}-",
            log_dir.with_name(re.sub(r"[^A-Za-z0-9_.-]+", "_", log_dir.name) + ".patroni"),
            synchronous=synchronous,
            cuttable_replication=cuttable_replication,
        )
        try:
            members.start()
            services = patroni.PatroniServices(members, cluster_services.redis)
            services.create_template(TEMPLATE)
            with stack.scenario(
                ClusterStack,
                services,
                TEMPLATE,
                recorder,
                log_dir,
                lambda: suites.failed(request),
                network=network,
                **options,
            ) as stack_:
                yield members, stack_
        finally:
            members.stop()

    return open_ha_cluster


@pytest.fixture
def cluster(open_cluster) -> Iterator[ClusterStack]:
    with open_cluster() as stack_:
        yield stack_


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[report.Figures]:
    yield from suites.figures(request, SUITE, _SESSION_RESULTS)
