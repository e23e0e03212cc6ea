"""Cluster scenario 7 — scenarios 1 and 2 with RabbitMQ as the broker.

The same work-spreads and partitioned-worker-host scenarios, with ``AWOOOP_BROKER_URL`` an
``amqp://`` URL: the machine's RabbitMQ, reached from the hosts through a proxy on the
bridge, a virtual host of its own per scenario. The rate limiter stays on the Redis on
``db`` (``AWOOOP_RATE_LIMIT_REDIS_URL``). What differs from Redis (the publishing path,
the consumer acknowledgement timeout instead of a visibility timeout, quorum queues) is in
``docs/cluster.md``.
"""

from __future__ import annotations

import pytest

from tests.cluster.test_work_spreads import run_spread
from tests.cluster.test_worker_host_partition import run_partition


@pytest.fixture
def amqp_cluster(open_cluster, rabbit):
    url = rabbit.new_vhost()
    try:
        with open_cluster(broker_url=url) as stack:
            yield stack
    finally:
        rabbit.delete_vhost(url)


@pytest.mark.timeout(1800)
def test_runs_spread_over_both_worker_hosts_on_rabbitmq(amqp_cluster, figures):
    figures.scenario("7.1", "Work spreads over two worker hosts, on RabbitMQ")
    run_spread(amqp_cluster.start(), figures)


@pytest.mark.timeout(1200)
def test_partitioned_worker_host_on_rabbitmq(amqp_cluster, figures):
    figures.scenario("7.2", "A worker host partitioned from the database, on RabbitMQ")
    run_partition(amqp_cluster.start(), figures)
