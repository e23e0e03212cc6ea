"""Clients that deliver events the way real providers do.

Alertmanager, Gitea, Telegram and LINE all retry a delivery that got a 5xx or no answer,
with back-off, and now and then deliver the same event twice. :class:`Provider` does that
against the web server: each :class:`Delivery` is POSTed until it gets a non-5xx answer (or
its attempts run out), and a share of deliveries is sent again, byte for byte, a little
later (an exact redelivery, which AwoooP must answer 200 with the same run).

Everything it saw is counted (:meth:`Provider.figures`): answers by status, retries after a
5xx or a connection error, ``Retry-After`` on 503s, redeliveries, latencies.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import hmac
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests


@dataclass
class Delivery:
    """One event: a POST to ``path`` with these headers and this exact body."""

    key: str
    path: str
    headers: dict[str, str]
    body: bytes
    # Filled in by the provider.
    run_id: str | None = None
    status: int | None = None
    attempts: int = 0
    redelivered: bool = False
    answers: list[int] = field(default_factory=list)


def api_event(project: dict[str, Any], key: str, payload: dict[str, Any]) -> Delivery:
    """A ``POST /v1/projects/{p}/runs`` event with ``Idempotency-Key: key``."""
    return Delivery(
        key=key,
        path=f"/v1/projects/{project['project_id']}/runs",
        headers={
            "Authorization": f"Bearer {project['api_token']}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
        body=json.dumps(payload, sort_keys=True).encode(),
    )


def gitea_event(project: dict[str, Any], key: str, payload: dict[str, Any]) -> Delivery:
    """A Gitea webhook delivery (``X-Gitea-Delivery: key``), signed with the project's secret."""
    body = json.dumps(payload, sort_keys=True).encode()
    signature = hmac.new(project["secrets"]["gitea"].encode(), body, hashlib.sha256).hexdigest()
    return Delivery(
        key=key,
        path=f"/v1/projects/{project['project_id']}/webhooks/gitea",
        headers={
            "X-Gitea-Signature": signature,
            "X-Gitea-Delivery": key,
            "X-Gitea-Event": "push",
            "Content-Type": "application/json",
        },
        body=body,
    )


class Provider:
    """Delivers events with retries and redeliveries from ``threads`` connections.

    - a 5xx or a connection error is retried after ``min(max_delay, base_delay * 2**n)``
      seconds (±50 % jitter), at most ``max_attempts`` tries;
    - ``redelivery_share`` of the deliveries are sent once more, exactly, after their first
      answer (from 0 to ``redelivery_delay`` seconds later);
    - ``rate`` (events per second, 0: as fast as possible) paces first deliveries.
    """

    def __init__(
        self,
        base_url: str,
        *,
        threads: int = 8,
        redelivery_share: float = 0.1,
        redelivery_delay: float = 2.0,
        max_attempts: int = 10,
        base_delay: float = 0.2,
        max_delay: float = 5.0,
        timeout: float = 15.0,
        rate: float = 0.0,
        seed: int = 11,
    ) -> None:
        self.base_url = base_url
        self.threads = threads
        self.redelivery_share = redelivery_share
        self.redelivery_delay = redelivery_delay
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.timeout = timeout
        self.rate = rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._local = threading.local()
        self.answers: collections.Counter[int] = collections.Counter()
        self.connection_errors = 0
        self.retries = 0
        self.retry_after_missing = 0  # 503 answers without Retry-After
        self.redeliveries = 0
        self.redelivery_mismatches: list[str] = []  # a redelivery answered with another run
        self.gave_up: list[str] = []
        self.latencies: list[float] = []

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def _post(self, delivery: Delivery) -> tuple[int | None, dict[str, Any]]:
        """One delivery until a non-5xx answer: (status, JSON answer); (None, {}) if it gave up."""
        for attempt in range(self.max_attempts):
            delivery.attempts += 1
            started = time.monotonic()
            try:
                response = self._session().post(
                    self.base_url + delivery.path,
                    headers=delivery.headers,
                    data=delivery.body,
                    timeout=self.timeout,
                )
            except requests.RequestException:
                with self._lock:
                    self.connection_errors += 1
                self._local.session = None  # a fresh connection next time
                status = None
            else:
                status = response.status_code
                with self._lock:
                    self.answers[status] += 1
                    self.latencies.append(time.monotonic() - started)
                    if status == 503 and "Retry-After" not in response.headers:
                        self.retry_after_missing += 1
                delivery.answers.append(status)
                if status < 500:
                    try:
                        return status, response.json()
                    except ValueError:
                        return status, {}
            if attempt + 1 < self.max_attempts:
                with self._lock:
                    self.retries += 1
                    jitter = self._rng.uniform(0.5, 1.0)
                time.sleep(min(self.max_delay, self.base_delay * 2**attempt) * jitter)
        with self._lock:
            self.gave_up.append(delivery.key)
        return None, {}

    def _deliver(self, delivery: Delivery, redeliver_after: float | None) -> Delivery:
        status, answer = self._post(delivery)
        delivery.status = status
        delivery.run_id = answer.get("run_id")
        if redeliver_after is not None and status is not None:
            time.sleep(redeliver_after)
            again, answer = self._post(delivery)
            with self._lock:
                self.redeliveries += 1
                if again is not None and answer.get("run_id") != delivery.run_id:
                    self.redelivery_mismatches.append(delivery.key)
            delivery.redelivered = True
        return delivery

    def deliver_all(self, deliveries: list[Delivery]) -> list[Delivery]:
        """Deliver every event (paced by ``rate``); returns them with their run ids."""
        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            futures = []
            started = time.monotonic()
            for i, delivery in enumerate(deliveries):
                if self.rate:
                    wait = started + i / self.rate - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                again = None
                if self._rng.random() < self.redelivery_share:
                    again = self._rng.uniform(0, self.redelivery_delay)
                futures.append(pool.submit(self._deliver, delivery, again))
            for future in futures:
                future.result()
        return deliveries

    def figures(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)

        def pct(p: float) -> float:
            return round(latencies[int(p * (len(latencies) - 1))] * 1000, 1) if latencies else 0.0

        return {
            "http_answers": dict(sorted(self.answers.items())),
            "http_5xx": sum(n for s, n in self.answers.items() if s >= 500),
            "http_503_without_retry_after": self.retry_after_missing,
            "connection_errors": self.connection_errors,
            "provider_retries": self.retries,
            "redeliveries": self.redeliveries,
            "redeliveries_answered_another_run": len(self.redelivery_mismatches),
            "deliveries_given_up": len(self.gave_up),
            "admission_p50_ms": pct(0.5),
            "admission_p99_ms": pct(0.99),
        }
