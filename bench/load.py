"""A small HTTP/1.1 keep-alive load generator (stdlib asyncio, loopback only).

N connections each keep exactly one request in flight (closed loop, like ``wrk``): send,
read the whole response, send the next. Responses are parsed minimally (status line and
``Content-Length``), so one process drives well over 2,000 requests/s on 2 cores.

Requests come from a source: :class:`Requests` (one path and set of headers, optionally a
header whose value changes per request), or :class:`RoundRobin` over several of them (e.g. one
per project, each with its own path and API token).

Two modes:
- duration: ``warmup`` seconds whose responses are discarded, then ``duration`` seconds
  measured; requests still in flight at the end are drained (not counted) within ``grace``.
- count: exactly ``total`` requests as fast as the connections go (``warmup`` is ignored).

Command line, for manual runs::

    python -m bench.load http://127.0.0.1:8000/v1/projects/p/runs -m POST -c 64 -d 5 \\
        -H 'Authorization: Bearer …' --body '{}' --unique-header Idempotency-Key
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class LoadError(RuntimeError):
    """The load could not be generated (server unreachable, not loopback, …)."""


# --- requests ------------------------------------------------------------------------------


def request_bytes(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Requests:
    """Request bytes, optionally with one header whose value changes per request.

    ``keys`` yields that header's values (e.g. unique idempotency keys); when it is
    exhausted the source is exhausted. Without ``key_header`` the same request repeats.
    """

    def __init__(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes = b"",
        key_header: str | None = None,
        keys: Iterator[str] | None = None,
        limit: int | None = None,
    ) -> None:
        self._fixed = request_bytes(method, path, headers, body)
        self._key_header = key_header
        self._keys = keys
        self._limit = limit
        self.issued = 0
        if key_header is not None:
            head, _, tail = self._fixed.partition(b"\r\n")
            self._before = head + b"\r\n" + key_header.encode("latin-1") + b": "
            self._after = b"\r\n" + tail

    def next(self) -> bytes | None:
        if self._limit is not None and self.issued >= self._limit:
            return None
        if self._key_header is None or self._keys is None:
            self.issued += 1
            return self._fixed
        key = next(self._keys, None)
        if key is None:
            return None
        self.issued += 1
        return self._before + key.encode("latin-1") + self._after


class Source(Protocol):
    """Where a load takes its requests from: ``next()`` gives the next request's bytes, None
    once exhausted; ``issued`` counts the requests given out."""

    issued: int

    def next(self) -> bytes | None: ...


class RoundRobin:
    """Requests from several sources in turn — one ``Requests`` per project, each with its own
    path and token, spreads consecutive requests over the projects. An exhausted source is
    skipped; ``limit`` caps the total (None: until every source is exhausted)."""

    def __init__(self, sources: Sequence[Source], limit: int | None = None) -> None:
        if not sources:
            raise LoadError("no sources to take requests from")
        self._sources = list(sources)
        self._turn = 0
        self._limit = limit
        self.issued = 0

    def next(self) -> bytes | None:
        if self._limit is not None and self.issued >= self._limit:
            return None
        for _ in range(len(self._sources)):
            source = self._sources[self._turn]
            self._turn = (self._turn + 1) % len(self._sources)
            request = source.next()
            if request is not None:
                self.issued += 1
                return request
        return None


def unique_keys(prefix: str | None = None) -> Iterator[str]:
    """``<prefix>-0``, ``<prefix>-1``, … (a random prefix by default)."""
    prefix = prefix or uuid.uuid4().hex[:12]
    return (f"{prefix}-{i}" for i in itertools.count())


def replay_keys(prefix: str, count: int) -> Iterator[str]:
    """The first ``count`` keys of ``unique_keys(prefix)`` again, cyclically (duplicates)."""
    if count <= 0:
        raise LoadError("no keys to replay")
    return (f"{prefix}-{i % count}" for i in itertools.count())


# --- results -------------------------------------------------------------------------------


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of durations in seconds, in milliseconds."""
    if not seconds:
        return float("nan")
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))] * 1000.0


@dataclass
class LoadResult:
    connections: int
    seconds: float  # length of the measured window
    completed: int = 0  # responses received in the window
    non_2xx: int = 0
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)  # seconds, responses in the window
    errors: int = 0  # connections dropped with a request in flight, failed reconnects
    unfinished: int = 0  # requests still in flight when the run had to stop
    issued: int = 0  # requests sent in total (warm-up included)
    spread: str = ""  # connections per server process when spread (see Spread)
    failure_lines: list[str] = field(default_factory=list)  # FAIL lines, set by the bench

    @property
    def rps(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, q: float) -> float:
        return percentile_ms(self.latencies, q)

    @property
    def p50(self) -> float:
        return self.percentile(0.50)

    @property
    def p99(self) -> float:
        return self.percentile(0.99)

    def failures(self) -> list[str]:
        """One line per kind of failed answer: each non-2xx status with its count, and
        connections dropped with a request in flight. A webhook provider that gets a 500
        retries or gives up, so every one of these is a failure, however rare."""
        lines = [
            f"HTTP {status}: {count} answer{'s' if count != 1 else ''}"
            for status, count in sorted(self.statuses.items())
            if not 200 <= status < 300
        ]
        if self.errors:
            lines.append(f"{self.errors} connection(s) dropped with a request in flight")
        return lines

    def summary(self) -> str:
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"{self.connections:>3} conns  {self.rps:8.0f} req/s  p50 {self.p50:6.1f} ms  "
            f"p99 {self.p99:6.1f} ms  non-2xx {self.non_2xx}  errors {self.errors}  "
            f"unfinished {self.unfinished}  [{codes}]"
            + (f"  per worker {self.spread}" if self.spread else "")
        )


# --- spreading connections over server processes ------------------------------------------


class Spread:
    """Open each connection again until the server process that accepted it (``owner_of(local
    port)``, None: not yet) holds less than its share, ceil(connections / processes); the
    share grows by one when a slot stays unfilled. Why: bench/NOTES.md."""

    def __init__(self, owner_of: Callable[[int], int | None], processes: int) -> None:
        self.owner_of = owner_of
        self.processes = max(1, processes)
        self.held: collections.Counter[int] = collections.Counter()
        self.reopened = 0

    def layout(self) -> str:
        """Connections per server process, e.g. ``4/4/4/4``."""
        counts = sorted(self.held.values(), reverse=True)
        counts += [0] * (self.processes - len(counts))
        return "/".join(str(c) for c in counts)

    async def owner(self, conn: _Conn) -> int | None:
        assert conn.transport is not None
        local_port = conn.transport.get_extra_info("sockname")[1]
        for _ in range(100):  # up to ~1 s for the server to accept()
            owner = self.owner_of(local_port)
            if owner is not None:
                return owner
            await asyncio.sleep(0.01)
        return None


# --- the engine ----------------------------------------------------------------------------


class _Conn(asyncio.Protocol):
    def __init__(self, run: _Run) -> None:
        self.run = run
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.sent_at = 0.0
        self.in_flight = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_next(self) -> None:
        request = self.run.next_request()
        if request is None or self.transport is None:
            self.in_flight = False
            self.run.conn_idle()
            return
        self.in_flight = True
        self.sent_at = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end]
            lower = head.lower()
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i + 17)
                length = int(lower[i + 17 : j if j >= 0 else len(lower)])
            else:
                length = 0
            total = end + 4 + length
            if len(buf) < total:
                break
            buf = buf[total:]
            self.run.record(int(head[9:12]), time.perf_counter() - self.sent_at)
            self.in_flight = False
            if b"\r\nconnection: close" in lower:
                self.buf = b""
                self.close()
                self.run.reconnect()
                return
            self.send_next()
        self.buf = buf

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self.transport = None
        if self.in_flight:
            self.in_flight = False
            self.run.result.errors += 1
        self.run.conn_lost()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
            self.transport = None


class _Run:
    def __init__(
        self,
        host: str,
        port: int,
        source: Source,
        connections: int,
        warmup: float,
        duration: float | None,
        grace: float,
        spread: Spread | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.spread = spread
        self.source = source
        self.connections = connections
        self.warmup = warmup if duration is not None else 0.0
        self.duration = duration
        self.grace = grace
        self.result = LoadResult(connections=connections, seconds=0.0)
        self.conns: list[_Conn] = []
        self.stopping = False
        self.window = (float("inf"), float("inf"))
        self.first_done = float("inf")
        self.last_done = 0.0
        self.quiet = asyncio.Event()  # set whenever nothing is in flight

    # called by connections
    def next_request(self) -> bytes | None:
        if self.stopping:
            return None
        return self.source.next()

    def record(self, status: int, latency: float) -> None:
        now = time.perf_counter()
        start, end = self.window
        if start <= now <= end:
            r = self.result
            r.completed += 1
            r.latencies.append(latency)
            r.statuses[status] += 1
            if not 200 <= status < 300:
                r.non_2xx += 1
            if now < self.first_done:
                self.first_done = now
            self.last_done = now

    def conn_idle(self) -> None:
        if not any(c.in_flight for c in self.conns):
            self.quiet.set()

    def conn_lost(self) -> None:
        self.conns = [c for c in self.conns if not c.closed]
        if not self.stopping:
            self.reconnect()
        self.conn_idle()

    def reconnect(self) -> None:
        if not self.stopping:
            asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            conn = await self._open()
        except OSError:
            self.result.errors += 1
            self.conn_idle()
            return
        conn.send_next()

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: _Conn(self), self.host, self.port)
        self.conns.append(conn)
        return conn

    async def _open_spread(self, spread: Spread) -> list[_Conn]:
        opened: list[_Conn] = []
        share = -(-self.connections // spread.processes)
        while len(opened) < self.connections:
            for _attempt in range(10 * spread.processes):
                conn = await self._open()
                owner = await spread.owner(conn)
                if owner is not None and spread.held[owner] < share:
                    spread.held[owner] += 1
                    opened.append(conn)
                    conn.send_next()  # warm-up traffic from now on
                    break
                spread.reopened += 1
                self.conns.remove(conn)
                conn.close()
            else:
                share += 1  # one worker keeps losing the accept() race: accept imbalance
        return opened

    async def main(self) -> LoadResult:
        opening = time.perf_counter()
        # Timed mode: nothing counts before the window; count mode: everything counts.
        never = float("inf")
        self.window = (never, never) if self.duration is not None else (0.0, never)
        try:
            if self.spread is None:
                opened = await asyncio.wait_for(
                    asyncio.gather(*(self._open() for _ in range(self.connections))), timeout=10
                )
                for conn in opened:
                    conn.send_next()
            else:
                await asyncio.wait_for(self._open_spread(self.spread), timeout=60)
                self.result.spread = self.spread.layout()
        except (OSError, TimeoutError) as exc:
            raise LoadError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        started = time.perf_counter()
        if self.duration is not None:
            self.window = (started + self.warmup, started + self.warmup + self.duration)
            await asyncio.sleep(self.warmup + self.duration)
            self.stopping = True
            self.result.seconds = self.duration
        self.quiet.clear()
        self.conn_idle()
        with contextlib.suppress(TimeoutError):
            # count mode: the whole run; duration mode: drain what is in flight
            timeout = self.grace if self.duration is not None else None
            while True:
                await asyncio.wait_for(self.quiet.wait(), timeout=timeout)
                if not any(c.in_flight for c in self.conns):
                    break
                self.quiet.clear()
        if self.duration is None:
            self.result.seconds = max(0.0, self.last_done - opening)
        return self.finish()

    def finish(self) -> LoadResult:
        """Stop: what is still in flight counted unfinished, every connection closed."""
        self.stopping = True
        self.result.unfinished = sum(1 for c in self.conns if c.in_flight)
        for conn in list(self.conns):
            conn.close()
        self.result.issued = self.source.issued
        return self.result


def run(
    url: str,
    source: Source,
    connections: int,
    *,
    duration: float | None = None,
    warmup: float = 0.0,
    grace: float = 5.0,
    timeout: float | None = None,
    spread: Spread | None = None,
) -> LoadResult:
    """Drive ``source`` against ``url`` (host and port only) with ``connections`` connections.

    ``duration`` set: timed mode; ``None``: until ``source`` is exhausted (count mode), bounded
    by ``timeout`` seconds (required in count mode). ``spread``: see :class:`Spread`.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    if host not in LOOPBACK:
        raise LoadError(f"refusing to load {host!r}: the benchmark only talks to loopback")
    if duration is None and timeout is None:
        raise LoadError("count mode needs a timeout")
    bound = timeout if timeout is not None else warmup + (duration or 0.0) + grace + 15.0
    if spread is not None:
        bound += 60.0
    the_run = _Run(host, port, source, connections, warmup, duration, grace, spread)

    async def bounded() -> LoadResult:
        try:
            return await asyncio.wait_for(the_run.main(), timeout=bound)
        except TimeoutError:
            the_run.result.seconds = max(1e-9, the_run.last_done - the_run.first_done)
            return the_run.finish()

    return asyncio.run(bounded())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url")
    parser.add_argument("-c", "--connections", type=int, default=16)
    parser.add_argument("-d", "--duration", type=float, default=5.0)
    parser.add_argument("-w", "--warmup", type=float, default=1.0)
    parser.add_argument("-n", "--requests", type=int, help="count mode: send exactly this many")
    parser.add_argument("-m", "--method", default="GET")
    parser.add_argument("-H", "--header", action="append", default=[], metavar="NAME: VALUE")
    parser.add_argument("--body", default="")
    parser.add_argument("--unique-header", help="header given a unique value per request")
    args = parser.parse_args(argv)
    headers = dict(h.split(":", 1) for h in args.header)
    headers = {k.strip(): v.strip() for k, v in headers.items()}
    body = args.body.encode()
    if body and "Content-Type" not in headers:
        headers["Content-Type"] = "application/json"
    path = urlsplit(args.url).path or "/"
    keys = unique_keys() if args.unique_header else None
    source = Requests(args.method, path, headers, body, args.unique_header, keys, args.requests)
    try:
        if args.requests:
            result = run(args.url, source, args.connections, timeout=300)
        else:
            result = run(
                args.url, source, args.connections, duration=args.duration, warmup=args.warmup
            )
    except LoadError as exc:
        print(f"bench.load: {exc}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- AwoooP's admission ----------------------------------------------------------------------

BODY = b'{"summary": "disk almost full on db-1", "source": "bench"}'


def events(
    tokens: dict[str, str],
    ids: Sequence[str],
    keys: Iterator[str] | None = None,
    limit: int | None = None,
    body: bytes = BODY,
) -> Source:
    """``POST /v1/projects/{p}/runs`` (the API channel) to the projects ``ids`` in turn, each
    with its own path and API token; new events (unique ``Idempotency-Key``) unless ``keys``."""
    keys = keys if keys is not None else unique_keys(uuid.uuid4().hex[:12])
    sources = [
        Requests(
            "POST",
            f"/v1/projects/{p}/runs",
            {"Authorization": f"Bearer {tokens[p]}", "Content-Type": "application/json"},
            body,
            key_header="Idempotency-Key",
            keys=keys,
            limit=limit if len(ids) == 1 else None,
        )
        for p in ids
    ]
    return sources[0] if len(sources) == 1 else RoundRobin(sources, limit=limit)
