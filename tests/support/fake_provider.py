"""A local stand-in for Telegram, LINE, Gitea and webhook receivers: records every request
and answers 200, or the statuses a test queued for a path prefix."""

from __future__ import annotations

import http.server
import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from tests.support import threaded_server


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class FakeProvider:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._scripted: dict[str, deque[int]] = {}
        self._always: dict[str, int] = {}
        self._lock = threading.Lock()
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = provider._record(Call(self.path, dict(self.headers), body))
                answer = json.dumps({"ok": status == 200, "result": True}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threaded_server.start(self._server, "fake-provider")

    def _record(self, call: Call) -> int:
        with self._lock:
            self.calls.append(call)
            for prefix, statuses in self._scripted.items():
                if call.path.startswith(prefix) and statuses:
                    return statuses.popleft()
            for prefix, status in self._always.items():
                if call.path.startswith(prefix):
                    return status
        return 200

    def script(self, prefix: str, *statuses: int) -> None:
        """Answer the next requests under ``prefix`` with ``statuses``, then 200."""
        self._scripted[prefix] = deque(statuses)

    def always(self, prefix: str, status: int) -> None:
        self._always[prefix] = status

    def to(self, prefix: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.path.startswith(prefix)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
