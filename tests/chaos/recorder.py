"""The recorder: a downstream service that counts side effects by ``Idempotency-Key``.

The test workflows (:mod:`tests.chaos.workflows`) POST to ``<url>/effects`` on every side
effect, with the step's ``effect_id`` as ``Idempotency-Key`` and a small JSON body (run, step,
phase, worker). The recorder is a third party: "one effect per effect_id" is counted here,
not by AwoooP's own tables. It behaves like a downstream that honours the key — a repeated
key is answered 200 with ``"duplicate": true`` and is not a second effect — and reports both
figures: raw calls, and distinct effects.

It runs in the test process (a threaded HTTP server on 127.0.0.1, or on ``host``: the
cluster suite binds it to its bridge address, where every host reaches it). ``fail_next(n)`` answers
the next ``n`` calls 503 without recording an effect (a downstream hiccup the step retries).
"""

from __future__ import annotations

import collections
import http.server
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from tests.support import threaded_server


@dataclass(frozen=True)
class Call:
    key: str
    body: dict[str, Any]
    duplicate: bool
    at: float  # when it arrived (the test process's time.monotonic())


class Recorder:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._lock = threading.Lock()
        self.calls: list[Call] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.first: dict[str, dict[str, Any]] = {}
        self.refused = 0  # answered 503 (no effect)
        self.missing_key = 0
        self._fail_next = 0
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsable": raw[:200].decode(errors="replace")}
                status, answer = recorder._record(self.headers.get("Idempotency-Key"), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A caller killed mid-request (the point of the suite) is not an error here.
                pass

        self._server = Server((host, 0), Handler)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threaded_server.start(self._server, "recorder")

    def _record(self, key: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if not key:
                self.missing_key += 1
                return 400, {"error": "Idempotency-Key is required"}
            if self._fail_next > 0:
                self._fail_next -= 1
                self.refused += 1
                return 503, {"error": "try again"}
            duplicate = key in self.counts
            self.counts[key] += 1
            self.calls.append(Call(key, body, duplicate, time.monotonic()))
            if not duplicate:
                self.first[key] = body
            return 200, {"key": key, "duplicate": duplicate}

    def fail_next(self, n: int) -> None:
        with self._lock:
            self._fail_next = n

    # --- figures -------------------------------------------------------------------------

    @property
    def raw_calls(self) -> int:
        with self._lock:
            return len(self.calls)

    @property
    def distinct_effects(self) -> int:
        with self._lock:
            return len(self.counts)

    def keys(self) -> set[str]:
        with self._lock:
            return set(self.counts)

    def repeated(self) -> dict[str, int]:
        """Keys seen more than once (each a redelivery the downstream deduplicated)."""
        with self._lock:
            return {k: n for k, n in self.counts.items() if n > 1}

    def calls_for(self, key: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.key == key]

    def calls_of(self, run_id: str, what: str) -> list[Call]:
        """The calls of one run whose body says ``what`` (e.g. ``tick``), in arrival order."""
        with self._lock:
            return [
                c
                for c in self.calls
                if c.body.get("run_id") == run_id and c.body.get("what") == what
            ]

    def figures(self) -> dict[str, Any]:
        repeated = self.repeated()
        return {
            "recorder_raw_calls": self.raw_calls,
            "recorder_distinct_effects": self.distinct_effects,
            "recorder_keys_seen_more_than_once": len(repeated),
            "recorder_max_calls_per_key": max(repeated.values(), default=1),
            "recorder_answered_503": self.refused,
        }

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
