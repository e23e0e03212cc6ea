"""Hostile requests for chaos scenario 8 (docs/reliability.md): a deterministic (seeded)
generator, and a raw HTTP/1.1 client that sends exactly the bytes generated.

Every channel is covered: the four webhooks (telegram, alertmanager, gitea, line), the API
channel (``POST /runs``), the runs API's reads, the management operations, tool results and
approval decisions. Each :class:`HostileRequest` carries the answers it may get — HTTP status
→ the error codes that status may carry (as ``/openapi.json`` documents them) — and
whether it is a legitimate request (``valid``: True must succeed, False must be refused, None
may go either way: the documents do not say, e.g. duplicate keys in a JSON object).

Requests come in :class:`Case` s: most cases are one request; a replay is several, sent in
order on one connection each (its first delivery is valid, the same key with another body
then gets 422 ``E-IDEMPOTENT-002``, the original again is a 200 duplicate of the same run).

What a request may write: only requests that may succeed (``valid`` True or None) can write,
and only the rows an admitted run has (dedupe, run, first history row, the deadline timer).
The generator never builds a management operation, tool result or approval decision that can
be applied: they are all refused, so they must write nothing at all.

The generator needs to know the target (:class:`Credentials`): the project's secrets and
tokens, runs in the states the requests aim at. The same seed and the same target give the
same requests (signatures differ with the secrets, nothing else does).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import http.client
import json
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, unquote

from awooop import errors
from awooop.web import params

ADMISSION_CHANNELS = ("telegram", "alertmanager", "gitea", "line", "api")
OTHER_CHANNELS = ("runs-read", "management", "tool-result", "approval", "webhook-unknown")
CHANNELS = ADMISSION_CHANNELS + OTHER_CHANNELS
# gunicorn refuses a longer request line itself (plain 400, documented in /openapi.json's
# info); generated paths stay below it so that every answer is the application's.
MAX_REQUEST_LINE = 4094

Expect = Mapping[int, frozenset[str]]


def refused(*classes: type[errors.AwoooPError]) -> dict[int, frozenset[str]]:
    """The answers for these catalogue errors: status → codes."""
    out: dict[int, set[str]] = {}
    for cls in classes:
        out.setdefault(cls.http_status, set()).add(cls.code)
    return {status: frozenset(codes) for status, codes in out.items()}


def success(*statuses: int) -> dict[int, frozenset[str]]:
    return {status: frozenset() for status in statuses}


def either(*expects: Expect) -> dict[int, frozenset[str]]:
    out: dict[int, frozenset[str]] = {}
    for expect in expects:
        for status, codes in expect.items():
            out[status] = out.get(status, frozenset()) | codes
    return out


BAD = refused(errors.MalformedRequest)
UNAUTHENTICATED = refused(errors.Unauthenticated)
FORBIDDEN = refused(errors.Forbidden)
TOO_LARGE = refused(errors.PayloadTooLarge)
MEDIA_TYPE = refused(errors.UnsupportedMediaType)
NOT_FOUND = refused(errors.NotFound)
KEY_REUSED = refused(errors.IdempotencyKeyReused)
NO_KEY = refused(errors.MissingIdempotencyKey)
METHOD = refused(errors.MethodNotAllowed)
ADMITTED = success(202)
OK = success(200)


@dataclasses.dataclass(frozen=True)
class HostileRequest:
    channel: str  # one of CHANNELS
    kind: str  # what is hostile about it, e.g. "deep-nesting"
    method: str
    target: str  # the request target on the wire: percent-encoded path and query, ASCII
    headers: tuple[tuple[str, bytes], ...]
    body: bytes
    expect: Expect
    valid: bool | None
    chunked: bool = False
    # A duplicate: its answer must name the run the case's first request made.
    same_run_as_first: bool = False
    # Spaces sent after ``body`` (kept out of memory until sent: bodies over 1 MiB).
    padding: int = 0

    def full_body(self) -> bytes:
        return self.body + b" " * self.padding if self.padding else self.body

    def describe(self, limit: int = 300) -> str:
        shown = {name: value.decode("latin-1")[:80] for name, value in self.headers}
        body = self.body[:400]
        size = len(self.body) + self.padding
        more = f"… ({size} bytes)" if size > 400 else ""
        framing = " chunked" if self.chunked else ""
        return (
            f"[{self.channel}/{self.kind}] {self.method} {self.target[:limit]}{framing} "
            f"headers={shown} body={body!r}{more}"
        )


@dataclasses.dataclass(frozen=True)
class Case:
    requests: tuple[HostileRequest, ...]


@dataclasses.dataclass(frozen=True)
class Credentials:
    """What the generator aims at. ``other_*``: a second project whose channels have no
    route (a valid event there is answered 200 ``ignored``) and one of its runs."""

    project_id: str
    secrets: Mapping[str, str]  # telegram, alertmanager, gitea, line
    tokens: Mapping[str, str]  # role → API token: viewer, operator, admin, ingest
    pending_run: str  # a PENDING, ACTIVE run: resume/retries refused, reads answered
    tool_run: str  # a run in WAITING_TOOL
    tool_step: str
    approval_run: str  # a run in WAITING_APPROVAL whose approval token is known
    approval_token: str
    approval_step: str
    other_project_id: str
    other_secrets: Mapping[str, str]
    other_token: str  # an operator token of the other project
    other_run: str
    max_body_bytes: int = 1024 * 1024


# Sending --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Answer:
    status: int | None  # None: no HTTP answer at all (the error says what happened)
    headers: dict[str, str]
    body: bytes
    error: str | None = None
    seconds: float = 0.0


def wire_bytes(request: HostileRequest, host: str) -> bytes:
    lines = [f"{request.method} {request.target} HTTP/1.1".encode(), f"Host: {host}".encode()]
    lines += [name.encode() + b": " + value for name, value in request.headers]
    lines.append(b"Connection: close")
    body = request.full_body()
    if request.chunked:
        lines.append(b"Transfer-Encoding: chunked")
    elif body or request.method == "POST":
        lines.append(f"Content-Length: {len(body)}".encode())
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    if not request.chunked:
        return head + body
    out = [head]
    for start in range(0, len(body), 65536):
        chunk = body[start : start + 65536]
        out.append(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def send(host: str, port: int, request: HostileRequest, timeout: float = 60.0) -> Answer:
    """One request on its own connection; the answer even when the server answered before
    reading the whole body (a 413 by Content-Length) and stopped reading."""
    started = time.monotonic()
    sock = socket.create_connection((host, port), timeout=timeout)
    send_error = None
    try:
        try:
            sock.sendall(wire_bytes(request, f"{host}:{port}"))
        except OSError as exc:  # the server answered and closed before taking it all
            send_error = f"{type(exc).__name__} while sending: {exc}"
        response = http.client.HTTPResponse(sock, method=request.method)
        try:
            response.begin()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            detail = f"{type(exc).__name__} while reading the answer: {exc}"
            error = f"{send_error}; {detail}" if send_error else detail
            return Answer(None, {}, b"", error, time.monotonic() - started)
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, headers, body, None, time.monotonic() - started)
    finally:
        sock.close()


# Generating -----------------------------------------------------------------------------------


def wrong(credential: str) -> str:
    """A credential of the same length that is surely not ``credential``: its first character
    changed (a random secret may start with any character, and a reversed one may read the
    same)."""
    return ("y" if credential[:1] == "x" else "x") + credential[1:]


def _sign(channel: str, secret: str, raw: bytes) -> list[tuple[str, bytes]]:
    digest = hmac.new(secret.encode(), raw, hashlib.sha256).digest()
    if channel == "gitea":
        return [("X-Gitea-Signature", digest.hex().encode())]
    return [("X-Line-Signature", base64.b64encode(digest))]


def _nested(depth: int, rng: random.Random) -> str:
    """A JSON value ``depth`` levels of arrays/objects deep."""
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


PLACEHOLDER = '"__HOSTILE__"'


class Generator:
    """``Generator(credentials, seed).cases(total)``: cases adding up to ``total`` requests."""

    def __init__(self, creds: Credentials, seed: int) -> None:
        self.creds = creds
        self.rng = random.Random(seed)
        self.seed = seed
        self.counter = 0
        self._builders: list[tuple[float, str, Callable[[], Case]]] = []
        for channel in ADMISSION_CHANNELS:
            for weight, kind, build in self._admission_kinds(channel):
                self._builders.append((weight, f"{channel}/{kind}", build))
        for weight, kind, build in self._other_kinds():
            self._builders.append((weight, kind, build))

    # -- identities ------------------------------------------------------------------------

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def _key(self) -> str:
        return f"h{self.seed}-{self._next()}"

    def _path(self, channel: str, project: str | None = None) -> str:
        project = self.creds.project_id if project is None else project
        if channel == "api":
            return f"/v1/projects/{project}/runs"
        return f"/v1/projects/{project}/webhooks/{channel}"

    # -- a valid event of each channel ----------------------------------------------------

    def _payload(self, channel: str, key: str, hostile: bool = True) -> dict[str, Any]:
        """A valid payload whose event key is ``key``; ``__HOSTILE__`` marks where a raw
        fragment may be put (a string value, so the payload is valid as it is)."""
        note = "__HOSTILE__" if hostile else f"note {key}"
        if channel == "telegram":
            return {
                "update_id": int(key.rsplit("-", 1)[1]) + 1_000_000 * (self.seed % 1000),
                "message": {
                    "message_id": 7,
                    "text": note,
                    "from": {"username": "ops"},
                    "chat": {"id": 42},
                },
            }
        if channel == "alertmanager":
            return {
                "version": "4",
                "receiver": "awooop",
                "groupKey": '{}:{alertname="DiskFull"}',
                "status": "firing",
                "alerts": [
                    {
                        "status": "firing",
                        "fingerprint": key,
                        "labels": {"alertname": "DiskFull", "instance": "db-1"},
                        "annotations": {"summary": note},
                        "startsAt": "2026-11-29T10:00:00Z",
                        "endsAt": "0001-01-01T00:00:00Z",
                    }
                ],
                "groupLabels": {"alertname": "DiskFull"},
            }
        if channel == "gitea":
            return {"action": "opened", "number": 3, "title": note, "repository": {"id": 1}}
        if channel == "line":
            return {"destination": "Uawooop", "events": [self._line_event(key, note)]}
        return {"summary": note, "host": "db-1"}

    @staticmethod
    def _line_event(key: str, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "webhookEventId": key,
            "timestamp": 1764400000000,
            "deliveryContext": {"isRedelivery": False},
            "source": {"type": "user", "userId": "U1"},
            "message": {"type": "text", "id": f"m-{key}", "text": text},
        }

    def _admission(
        self,
        channel: str,
        kind: str,
        key: str,
        raw: bytes,
        expect: Expect,
        valid: bool | None,
        *,
        auth: str = "good",
        content_type: str | None = "application/json",
        project: str | None = None,
        query: str = "",
        chunked: bool = False,
        extra: list[tuple[str, bytes]] | None = None,
        omit: tuple[str, ...] = (),
        method: str = "POST",
        same_run_as_first: bool = False,
        padding: int = 0,
    ) -> HostileRequest:
        """One admission request, signed over ``raw`` + ``padding`` spaces. ``auth``: good,
        none, wrong, other (the other project's credential), or a channel's own variant.
        ``extra`` headers replace the generated ones of the same name; ``omit`` drops some."""
        creds = self.creds
        headers: list[tuple[str, bytes]] = []
        if content_type is not None:
            headers.append(("Content-Type", content_type.encode()))
        secret = creds.other_secrets if auth == "other" else creds.secrets
        signed = raw + b" " * padding
        if channel == "telegram":
            value = {
                "good": secret["telegram"],
                "other": secret["telegram"],
                "wrong": wrong(creds.secrets["telegram"]),
                "empty": "",
            }.get(auth)
            if value is not None:
                headers.append(("X-Telegram-Bot-Api-Secret-Token", value.encode()))
        elif channel == "alertmanager":
            good = secret["alertmanager"]
            value = {
                "good": f"Bearer {good}",
                "other": f"Bearer {good}",
                "basic": "Basic " + base64.b64encode(f"am:{good}".encode()).decode(),
                "wrong": f"Bearer {wrong(good)}",
                "basic-wrong": "Basic " + base64.b64encode(b"am:nope").decode(),
                "basic-garbage": "Basic %%%not-base64",
                "basic-no-password": "Basic " + base64.b64encode(good.encode()).decode(),
                "empty": "Bearer ",
                "scheme": f"Token {good}",
            }.get(auth)
            if value is not None:
                headers.append(("Authorization", value.encode()))
        elif channel in ("gitea", "line"):
            if auth in ("good", "other"):
                headers += _sign(channel, secret[channel], signed)
            elif auth == "wrong":
                headers += _sign(channel, wrong(secret[channel]), signed)
            elif auth == "other-body":
                headers += _sign(channel, secret[channel], signed + b" ")
            elif auth == "garbage":
                name = "X-Gitea-Signature" if channel == "gitea" else "X-Line-Signature"
                headers.append((name, b"not a signature \xff"))
            if channel == "gitea":
                headers += [("X-Gitea-Delivery", key.encode()), ("X-Gitea-Event", b"issues")]
        else:  # api
            token = {
                "good": creds.tokens["ingest"],
                "operator": creds.tokens["operator"],
                "viewer": creds.tokens["viewer"],
                "other": creds.other_token,
                "wrong": wrong(creds.tokens["operator"]),
                "empty": "",
            }.get(auth)
            if token is not None:
                headers.append(("Authorization", f"Bearer {token}".encode()))
            elif auth == "basic":
                headers.append(("Authorization", b"Basic " + base64.b64encode(b"a:b")))
            headers.append(("Idempotency-Key", key.encode()))
        replaced = {name.lower() for name, _ in extra or []} | {n.lower() for n in omit}
        headers = [h for h in headers if h[0].lower() not in replaced] + list(extra or [])
        return HostileRequest(
            channel=channel,
            kind=kind,
            method=method,
            target=self._path(channel, project) + query,
            headers=tuple(headers),
            body=raw,
            expect=expect,
            valid=valid,
            chunked=chunked,
            same_run_as_first=same_run_as_first,
            padding=padding,
        )

    def _raw(self, channel: str, key: str, fragment: str | None = None) -> bytes:
        text = json.dumps(self._payload(channel, key, hostile=fragment is not None))
        if fragment is not None:
            text = text.replace(PLACEHOLDER, fragment, 1)
        return text.encode("utf-8", "surrogatepass")

    # -- admission kinds --------------------------------------------------------------------

    def _admission_kinds(self, channel: str) -> list[tuple[float, str, Callable[[], Case]]]:
        rng = self.rng

        def one(request: HostileRequest) -> Case:
            return Case((request,))

        def valid() -> Case:
            key = self._key()
            return one(
                self._admission(channel, "valid", key, self._raw(channel, key), ADMITTED, True)
            )

        def random_bytes() -> Case:
            key = self._key()
            raw = rng.randbytes(rng.randint(1, 4096))
            return one(self._admission(channel, "random-bytes", key, raw, BAD, False))

        def truncated() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            cut = raw[: rng.randint(1, len(raw) - 1)]
            return one(self._admission(channel, "truncated-json", key, cut, BAD, False))

        def deep() -> Case:
            key = self._key()
            # The fragment sits one level inside the body (two for telegram/alertmanager/
            # line, whose placeholder is in a nested object): beyond 64 whatever the depth.
            depth = rng.choice([64, 65, 100, 1_000, 20_000, 100_000])
            raw = self._raw(channel, key, _nested(depth, rng))
            return one(self._admission(channel, f"deep-nesting-{depth}", key, raw, BAD, False))

        def at_depth_limit() -> Case:
            key = self._key()
            # The body itself is level 1; the placeholder sits inside ``outer`` levels of
            # objects and arrays: a value of 64 - outer levels there makes 64 in all.
            outer = {"telegram": 2, "alertmanager": 4, "gitea": 1, "line": 4, "api": 1}[channel]
            if rng.random() < 0.5:
                raw = self._raw(channel, key, _nested(64 - outer, rng))
                return one(self._admission(channel, "depth-64", key, raw, ADMITTED, True))
            raw = self._raw(channel, key, _nested(65 - outer, rng))
            return one(self._admission(channel, "depth-65", key, raw, BAD, False))

        def duplicate_keys() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            # The same name twice in the body's own object, the second value another type.
            dup = b'{"dup": "first", "dup": {"second": [1, 2]}, ' + raw[1:]
            expect = either(ADMITTED, BAD)
            return one(self._admission(channel, "duplicate-keys", key, dup, expect, None))

        def nul_raw() -> Case:
            key = self._key()
            raw = self._raw(channel, key, '"before\x00after"')
            if rng.random() < 0.3:
                raw = self._raw(channel, key) + b"\x00"
            return one(self._admission(channel, "nul-raw", key, raw, BAD, False))

        def nul_escaped() -> Case:
            key = self._key()
            fragment = rng.choice(
                [
                    '"before\\u0000after"',
                    '{"\\u0000": 1}',
                    '["\\u0000"]',
                    '"\\ud800"',
                    '"\\udfff x"',
                ]
            )
            raw = self._raw(channel, key, fragment)
            return one(self._admission(channel, "nul-escaped", key, raw, BAD, False))

        def huge_number() -> Case:
            key = self._key()
            fragment = rng.choice(["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1E999"])
            raw = self._raw(channel, key, fragment)
            return one(self._admission(channel, "huge-float", key, raw, BAD, False))

        def huge_int() -> Case:
            key = self._key()
            digits = rng.choice([400, 1_001, 4_300, 4_301, 10_000])
            raw = self._raw(channel, key, "9" * digits)
            expect = either(ADMITTED, BAD)  # undocumented: PostgreSQL's numeric stores them
            return one(self._admission(channel, f"huge-int-{digits}", key, raw, expect, None))

        def wrong_auth() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            variants = {
                "telegram": ["none", "wrong", "empty", "other"],
                "alertmanager": [
                    "none",
                    "wrong",
                    "empty",
                    "other",
                    "basic-wrong",
                    "basic-garbage",
                    "basic-no-password",
                    "scheme",
                ],
                "gitea": ["none", "wrong", "other", "other-body", "garbage"],
                "line": ["none", "wrong", "other", "other-body", "garbage"],
                "api": ["none", "wrong", "empty", "other", "basic", "viewer"],
            }[channel]
            auth = rng.choice(variants)
            expect = FORBIDDEN if auth == "viewer" else UNAUTHENTICATED
            return one(self._admission(channel, f"auth-{auth}", key, raw, expect, False, auth=auth))

        def good_basic_auth() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            return one(
                self._admission(channel, "auth-basic", key, raw, ADMITTED, True, auth="basic")
            )

        def content_type() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            ctype = rng.choice(
                [
                    None,
                    "text/plain",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data; boundary=x",
                    "application/jsonp",
                    "text/json",
                    "application/json-patch+json",
                    "",
                ]
            )
            auth = rng.choice(["good", "good", "none"])
            expect = either(MEDIA_TYPE, UNAUTHENTICATED) if auth == "none" else MEDIA_TYPE
            return one(
                self._admission(
                    channel,
                    "content-type",
                    key,
                    raw,
                    expect,
                    False,
                    auth=auth,
                    content_type=ctype,
                )
            )

        def charset() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            return one(
                self._admission(
                    channel,
                    "content-type-charset",
                    key,
                    raw,
                    ADMITTED,
                    True,
                    content_type="application/json; charset=utf-8",
                )
            )

        def oversize() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            chunked = rng.random() < 0.5
            variant = rng.choice(["signed", "signed", "no-auth", "garbage"])
            if variant == "garbage":
                raw = rng.randbytes(64)
            padding = self.creds.max_body_bytes + rng.randint(1, 65536) - len(raw)
            auth = "none" if variant != "signed" else "good"
            # The limit is checked before parsing, whatever the framing: 413. A request
            # with other faults as well may be refused for one of them instead.
            expect = TOO_LARGE
            if variant != "signed":
                expect = either(TOO_LARGE, UNAUTHENTICATED, MEDIA_TYPE, BAD)
            return one(
                self._admission(
                    channel,
                    f"oversize-{variant}{'-chunked' if chunked else ''}",
                    key,
                    raw,
                    expect,
                    False,
                    auth=auth,
                    chunked=chunked,
                    content_type="application/json" if variant != "garbage" else "text/plain",
                    padding=padding,
                )
            )

        def at_size_limit() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            chunked = rng.random() < 0.5
            return one(
                self._admission(
                    channel,
                    f"size-at-limit{'-chunked' if chunked else ''}",
                    key,
                    raw,
                    ADMITTED,
                    True,
                    chunked=chunked,
                    padding=self.creds.max_body_bytes - len(raw),
                )
            )

        def unknown_project() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            project = rng.choice(
                [
                    f"ghost-{self.seed}-{self._next()}",
                    "UPPER",
                    "a" * 65,
                    quote("ünïcødé"),
                    quote("проект"),
                    "-leading-dash",
                    "%00",
                    "..",
                    "%2e%2e",
                    "p%20x",
                    quote("p\u202ex"),
                    "x" * 3000,
                ]
            )
            return one(
                self._admission(
                    channel, "unknown-project", key, raw, UNAUTHENTICATED, False, project=project
                )
            )

        def path_trick() -> Case:
            key = self._key()
            raw = self._raw(channel, key)
            pid = self.creds.project_id
            trick = rng.choice(
                [
                    f"..%2f{pid}",
                    f"{pid}%2f..%2f{pid}",
                    f"{pid}%2f",
                    f"..%2F..%2F{pid}",
                    f"{pid}%2F.",
                ]
            )
            # The decoded path has more segments: no route (404), never another project's.
            expect = NOT_FOUND
            return one(
                self._admission(channel, "path-trick", key, raw, expect, False, project=trick)
            )

        def wrong_method() -> Case:
            key = self._key()
            method = rng.choice(["GET", "PUT", "DELETE", "PATCH"])
            if channel == "api" and method == "GET":
                method = "PUT"  # GET /runs is the runs list
            raw = self._raw(channel, key)
            request = self._admission(channel, "wrong-method", key, raw, METHOD, False)
            return one(dataclasses.replace(request, method=method))

        def replay() -> Case:
            key = self._key()
            first_raw = self._raw(channel, key)
            other_raw = self._raw(channel, key, '"another body"')
            first = self._admission(channel, "replay-first", key, first_raw, ADMITTED, True)
            if channel == "alertmanager":
                # The key is the notification's identity, and so is its digest: a retry
                # whose other fields differ is a duplicate, never a 422.
                changed = self._admission(
                    channel, "replay-other-body", key, other_raw, OK, True, same_run_as_first=True
                )
            else:
                changed = self._admission(
                    channel, "replay-other-body", key, other_raw, KEY_REUSED, False
                )
            again = self._admission(
                channel, "replay-exact", key, first_raw, OK, True, same_run_as_first=True
            )
            return Case((first, changed, again))

        kinds: list[tuple[float, str, Callable[[], Case]]] = [
            (3, "valid", valid),
            (3, "random-bytes", random_bytes),
            (3, "truncated-json", truncated),
            (3, "deep-nesting", deep),
            (1.5, "depth-limit", at_depth_limit),
            (2, "duplicate-keys", duplicate_keys),
            (2, "nul-raw", nul_raw),
            (2, "nul-escaped", nul_escaped),
            (2, "huge-float", huge_number),
            (1.5, "huge-int", huge_int),
            (4, "wrong-auth", wrong_auth),
            (2, "content-type", content_type),
            (0.5, "content-type-charset", charset),
            (0.7, "oversize", oversize),
            (0.3, "size-at-limit", at_size_limit),
            (2, "unknown-project", unknown_project),
            (1, "path-trick", path_trick),
            (0.7, "wrong-method", wrong_method),
            (2, "replay", replay),
            (3, "type-confusion", lambda: self._type_confusion(channel)),
        ]
        if channel == "alertmanager":
            kinds.append((1, "auth-basic", good_basic_auth))
        if channel == "line":
            kinds.append((1.5, "replay-partial", self._line_partial_replay))
        return kinds

    def _type_confusion(self, channel: str) -> Case:
        """Valid JSON, good credentials, fields of the wrong type or missing."""
        rng = self.rng
        key = self._key()
        payload = self._payload(channel, key, hostile=False)
        expect: Expect = BAD
        valid: bool | None = False
        extra: list[tuple[str, bytes]] | None = None
        query = ""
        if channel == "telegram":
            variant = rng.choice(
                ["update_id", "update_id", "missing", "callback", "callback", "bot_id", "message"]
            )
            if variant == "update_id":
                payload["update_id"] = rng.choice(["1", True, 1.5, None, [1], {"id": 1}, 10**300])
            elif variant == "missing":
                del payload["update_id"]
            elif variant == "callback":
                # Not an approval button, whatever the shape: an update like any other
                # (a run) or a 400 — never a 5xx.
                payload["callback_query"] = rng.choice(
                    ["ap:x", 5, [1, 2], {"data": 5}, {"data": None}, {"id": "1", "data": {}}]
                )
                expect, valid = either(ADMITTED, BAD), None
            elif variant == "message":
                payload["message"] = rng.choice(["text", 5, None, [], {"text": {"x": 1}}])
                expect, valid = either(ADMITTED, BAD), None
            else:
                query = "?bot_id=" + rng.choice(
                    ["abc", "%D9%A1", "1" * 21, "", "-1", "1%00", "1.0", "%EF%BC%91"]
                )
        elif channel == "alertmanager":
            variant = rng.choice(
                ["alerts", "alert", "status", "receiver", "groupKey", "fingerprint", "list"]
            )
            if variant == "alerts":
                payload["alerts"] = rng.choice([[], "x", None, {"a": 1}, 5])
            elif variant == "alert":
                payload["alerts"] = [rng.choice([5, "x", None, []])]
            elif variant == "status":
                payload["status"] = rng.choice(["weird", 1, None, "FIRING"])
            elif variant in ("receiver", "groupKey"):
                payload[variant] = rng.choice([5, None, ["x"], {"x": 1}])
            elif variant == "fingerprint":
                payload["alerts"][0][
                    rng.choice(["fingerprint", "startsAt", "endsAt", "status"])
                ] = rng.choice([5, None, ["x"]])
            else:
                payload = [payload]
        elif channel == "gitea":
            variant = rng.choice(["no-delivery", "blank-delivery", "long-delivery", "list"])
            if variant == "no-delivery":
                extra = [("X-Gitea-Event", b"issues"), ("X-Gitea-Delivery", b"")]
            elif variant == "blank-delivery":
                extra = [("X-Gitea-Event", b"issues"), ("X-Gitea-Delivery", b"   ")]
            elif variant == "long-delivery":
                extra = [("X-Gitea-Delivery", b"d" * 257)]
            else:
                payload = [payload]
        elif channel == "line":
            variant = rng.choice(
                ["events", "event", "event-id", "repeated", "verification", "postback"]
            )
            if variant == "events":
                payload["events"] = rng.choice(["x", None, 5, {"a": 1}])
            elif variant == "event":
                payload["events"] = [rng.choice([5, "x", None, []])]
            elif variant == "event-id":
                payload["events"][0]["webhookEventId"] = rng.choice([5, None, "", "e" * 257])
            elif variant == "repeated":
                payload["events"].append(payload["events"][0])
            elif variant == "verification":
                payload["events"] = []
                expect, valid = OK, True  # LINE's verification request: 200, no run
            else:
                # A postback that is not one of our approval buttons, whatever its shape.
                payload["events"][0]["type"] = "postback"
                payload["events"][0]["postback"] = rng.choice(
                    ["ap:x", 5, None, [1], {"data": 5}, {"data": "not ours"}]
                )
                expect, valid = either(ADMITTED, BAD), None
        else:  # api
            if rng.random() < 0.6:
                bad_key = rng.choice(
                    [
                        None,
                        b"",
                        b"k" * 256,
                        "clé".encode(),
                        "clé".encode("latin-1"),
                        b"a\tb",
                        b"a\x7fb",
                    ]
                )
                expect = NO_KEY
                if bad_key is None:
                    request = self._admission(
                        channel,
                        "type-confusion",
                        key,
                        json.dumps(payload).encode(),
                        expect,
                        False,
                        omit=("Idempotency-Key",),
                    )
                    return Case((request,))
                extra = [("Idempotency-Key", bad_key)]
            else:
                payload = rng.choice([[payload], "string", 5, None, True])
        raw = json.dumps(payload).encode()
        return Case(
            (
                self._admission(
                    channel,
                    "type-confusion",
                    key,
                    raw,
                    expect,
                    valid,
                    query=query,
                    extra=extra,
                ),
            )
        )

    def _line_partial_replay(self) -> Case:
        """One LINE request with a new event and a replayed one whose body changed: refused
        whole (422), so the new event must not have been written — the third request
        proves it by admitting that event as new (202)."""
        key_a, key_b = self._key(), self._key()
        first_raw = json.dumps({"destination": "U", "events": [self._line_event(key_a, "a")]})
        both = {
            "destination": "U",
            "events": [self._line_event(key_b, "b"), self._line_event(key_a, "changed")],
        }
        only_b = {"destination": "U", "events": [self._line_event(key_b, "b")]}
        return Case(
            (
                self._admission("line", "partial-first", key_a, first_raw.encode(), ADMITTED, True),
                self._admission(
                    "line", "partial-replay", key_b, json.dumps(both).encode(), KEY_REUSED, False
                ),
                self._admission(
                    "line", "partial-new-after", key_b, json.dumps(only_b).encode(), ADMITTED, True
                ),
            )
        )

    # -- the runs API, management, tool results, approvals --------------------------------

    def _api_request(
        self,
        channel: str,
        kind: str,
        method: str,
        path: str,
        expect: Expect,
        valid: bool | None,
        *,
        token: str | None,
        body: bytes = b"",
        content_type: str | None = None,
        extra: list[tuple[str, bytes]] | None = None,
        chunked: bool = False,
        padding: int = 0,
    ) -> HostileRequest:
        headers: list[tuple[str, bytes]] = []
        if token is not None:
            headers.append(("Authorization", f"Bearer {token}".encode()))
        if content_type is not None:
            headers.append(("Content-Type", content_type.encode()))
        headers += extra or []
        return HostileRequest(
            channel=channel,
            kind=kind,
            method=method,
            target=path,
            headers=tuple(headers),
            body=body,
            expect=expect,
            valid=valid,
            chunked=chunked,
            padding=padding,
        )

    def _run_id_trick(self) -> str:
        """A run id that names no run of this project, as sent (percent-encoded)."""
        rng = self.rng
        real = self.creds.pending_run
        return rng.choice(
            [
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                self.creds.other_run,
                "..",
                "%2e%2e",
                "..%2f..%2f..%2fhealthz",
                f"..%2f{real}",
                f"{real}%2f..",
                "%00",
                f"{real}%00",
                quote("ünïcødé-run"),
                quote("٣٣٣"),
                "x" * 3000,
                "1",
                "null",
                "%27%20OR%20%271%27=%271",
                "%25",
                real[:-1],
                real + "0",
                real.replace("-", "")[:31] + "g",
            ]
        )

    def _alias(self, run_id: str) -> str:
        """Another spelling of a run's UUID (Python's ``uuid.UUID`` reads all of these)."""
        real = uuid.UUID(run_id)
        digits = str(real).translate({ord(c): 0xFF10 + int(c) for c in "0123456789"})
        return self.rng.choice(
            [real.hex, f"%7B{real}%7D", f"urn:uuid:{real}", str(real).upper(), quote(digits)]
        )

    def _bad_json(self) -> tuple[str, bytes]:
        """A body that is not a storable JSON object (400): its kind and bytes."""
        rng = self.rng
        kind = rng.choice(
            [
                "random-bytes",
                "truncated-json",
                "deep-nesting",
                "nul-raw",
                "nul-escaped",
                "huge-float",
                "not-object",
                "empty",
            ]
        )
        if kind == "random-bytes":
            return kind, rng.randbytes(rng.randint(1, 2048))
        if kind == "truncated-json":
            raw = b'{"operation_id": "x", "event_id": "e", "decision": "approve"}'
            return kind, raw[: rng.randint(1, len(raw) - 1)]
        if kind == "deep-nesting":
            depth = rng.choice([64, 100, 5_000, 100_000])
            return kind, f'{{"operation_id": "op", "x": {_nested(depth, rng)}}}'.encode()
        if kind == "nul-raw":
            return kind, b'{"operation_id": "a\x00b", "decision": "approve"}'
        if kind == "nul-escaped":
            return kind, rng.choice(
                [
                    b'{"operation_id": "a\\u0000b", "decision": "approve"}',
                    b'{"x\\u0000": 1, "decision": "approve"}',
                    b'{"operation_id": "o", "reason": "\\ud800", "comment": "\\ud800"}',
                ]
            )
        if kind == "huge-float":
            return kind, rng.choice(
                [
                    b'{"operation_id": "o", "decision": "approve", "x": 1e400}',
                    b'{"operation_id": "o", "decision": "approve", "x": NaN}',
                    b'{"event_id": "e", "step": "s", "status": "succeeded", "output": -Infinity}',
                ]
            )
        if kind == "not-object":
            return kind, rng.choice([b"[]", b"null", b"5", b'"x"', b"true"])
        return kind, b""

    def _token(self, good: str) -> tuple[str, str | None, Expect]:
        """A token to present: (label, token, the refusal it gets before anything else)."""
        rng = self.rng
        label = rng.choice(["good"] * 6 + ["none", "wrong", "other", "ghost"])
        if label == "good":
            return label, good, {}
        token = {
            "none": None,
            "wrong": wrong(good),
            "other": self.creds.other_token,
            "ghost": "not-a-token",
        }[label]
        return label, token, UNAUTHENTICATED

    def _other_kinds(self) -> list[tuple[float, str, Callable[[], Case]]]:
        creds = self.creds
        rng = self.rng
        project = f"/v1/projects/{creds.project_id}"

        def one(request: HostileRequest) -> Case:
            return Case((request,))

        def no_route(run_id: str) -> bool:
            # An encoded slash gives the decoded path more segments: no route at all, so
            # nothing of the view runs (not even authentication): 404, or 405 if the
            # path happens to be another route's.
            return "%2f" in run_id.lower()

        # Reads: authenticate (401/403) → query parameters (400) → run id (404).

        def read_run() -> Case:
            sub = rng.choice(["", "/events"])
            label, token, auth_fail = self._token(creds.tokens["viewer"])
            aim = rng.choice(["real", "trick", "trick", "alias"])
            expect: Expect
            valid: bool | None
            if aim == "real":
                run_id, expect, valid = creds.pending_run, OK, True
            elif aim == "alias":
                run_id, expect, valid = self._alias(creds.pending_run), either(OK, NOT_FOUND), None
            else:
                run_id, expect, valid = self._run_id_trick(), NOT_FOUND, False
            query = ""
            if sub and rng.random() < 0.4:
                query, refusal = self._event_query(run_id)
                if refusal is not None:
                    expect, valid = refusal, False
            if label == "good" and rng.random() < 0.1:
                token, auth_fail, label = creds.tokens["ingest"], FORBIDDEN, "ingest"
            if auth_fail:
                expect, valid = auth_fail, False
            if no_route(run_id):
                expect, valid = either(NOT_FOUND, METHOD), False
            return one(
                self._api_request(
                    "runs-read",
                    f"get-run{sub}-{aim}-{label}",
                    "GET",
                    f"{project}/runs/{run_id}{sub}{query}",
                    expect,
                    valid,
                    token=token,
                )
            )

        def list_runs() -> Case:
            label, token, auth_fail = self._token(creds.tokens["viewer"])
            which = rng.choice(["runs", "interventions"])
            query, refusal = self._list_query(which)
            expect: Expect = refusal if refusal is not None else OK
            valid = refusal is None
            if label == "good" and rng.random() < 0.1:
                token, auth_fail, label = creds.tokens["ingest"], FORBIDDEN, "ingest"
            if auth_fail:
                expect, valid = auth_fail, False
            base = project
            if rng.random() < 0.15:
                other = rng.choice(["ghost", "UPPER", "%00", "..", quote("ü"), "x" * 65])
                other = rng.choice([other, creds.other_project_id])
                base, label = f"/v1/projects/{other}", f"{label}-project-{other[:8]}"
                if token == creds.other_token:  # the other project's own token reads it
                    token = creds.tokens["viewer"]
                expect, valid = UNAUTHENTICATED, False
            return one(
                self._api_request(
                    "runs-read",
                    f"list-{which}-{label}",
                    "GET",
                    f"{base}/{which}{query}",
                    expect,
                    valid,
                    token=token,
                )
            )

        # Management: authenticate (401/403) → content type (415) → size (413) → JSON (400)
        # → operation_id (400 E-OPERATION-004) → reason (400) → If-Match (400) → run id
        # (404) → manual close disabled (409 E-OPERATION-003) → the run (404, 412, 409).
        # Nothing here can be applied: the real run is PENDING and ACTIVE, so resume and
        # the retries are refused, and a pause or a cancel carries a version it has not.

        def management() -> Case:
            op = rng.choice(
                [
                    "pause",
                    "resume",
                    "cancel",
                    "retry-compensation",
                    "retry-resolution",
                    "manual-close",
                ]
            )
            role = "admin" if op == "manual-close" else rng.choice(["operator", "admin"])
            label, token, auth_fail = self._token(creds.tokens[role])
            if label == "good" and rng.random() < 0.12:
                weaker = ["viewer", "ingest"] + (["operator"] if op == "manual-close" else [])
                label = rng.choice(weaker)
                token, auth_fail = creds.tokens[label], FORBIDDEN
            aim = rng.choice(["real", "real", "trick"])
            run_id = creds.pending_run if aim == "real" else self._run_id_trick()
            body = json.dumps({"operation_id": f"op-{self._key()}", "reason": "chaos"}).encode()
            ctype: str | None = "application/json"
            chunked, padding = False, 0
            extra: list[tuple[str, bytes]] = []
            fault = rng.choice(["none"] * 5 + ["json", "op-id", "reason", "media", "size", "if"])
            refusal: Expect = {}
            if fault == "json":
                fault, body = self._bad_json()
                refusal = BAD
            elif fault == "op-id":
                value = rng.choice([None, "", "o" * 129, 5, ["x"], {"a": 1}, True])
                body = json.dumps({"reason": "x"} if value is None else {"operation_id": value})
                body = body.encode()
                refusal = refused(errors.InvalidOperation)
            elif fault == "reason":
                reason = rng.choice([5, ["x"], {"a": 1}, "r" * 1001, False])
                body = json.dumps({"operation_id": f"op-{self._key()}", "reason": reason}).encode()
                refusal = BAD
            elif fault == "media":
                ctype = rng.choice([None, "text/plain", "application/x-www-form-urlencoded"])
                refusal = MEDIA_TYPE
            elif fault == "size":
                chunked = rng.random() < 0.5
                padding = creds.max_body_bytes + 10 - len(body)
                refusal = TOO_LARGE
            elif fault == "if":
                bad = rng.choice([b'"abc"', b'"99999999999999999999"', '"٣"'.encode(), b"W/"])
                extra.append(("If-Match", bad))
                refusal = BAD
            outcome: Expect
            if aim == "trick":
                outcome = NOT_FOUND
                if op == "manual-close":  # checked before the run is looked up
                    outcome = either(NOT_FOUND, refused(errors.ManualCloseDisabled))
            elif op == "manual-close":
                outcome = refused(errors.ManualCloseDisabled)
            else:
                if op in ("pause", "cancel") or rng.random() < 0.3:
                    if fault != "if":  # a pause or a cancel is never sent without one
                        extra.append(("If-Match", b'"999999"'))
                    outcome = refused(errors.VersionMismatch)
                else:
                    outcome = refused(errors.OperationRefused)
                    if fault != "if" and rng.random() < 0.3:
                        extra.append(("If-Match", b"*"))
            expect = auth_fail or refusal or outcome
            if no_route(run_id):
                expect = either(NOT_FOUND, METHOD)
            return one(
                self._api_request(
                    "management",
                    f"{op}-{aim}-{label}-{fault}",
                    "POST",
                    f"{project}/runs/{run_id}/{op}",
                    expect,
                    False,
                    token=token,
                    body=body,
                    content_type=ctype,
                    extra=extra,
                    chunked=chunked,
                    padding=padding,
                )
            )

        # Tool results: authenticate (401/403) → content type (415) → size (413) → JSON
        # (400) → run id (404) → fields (400) → the run (404). Well-formed results only go
        # to runs that are not this project's: none can be delivered.

        def tool_result() -> Case:
            good_token = rng.choice([creds.tokens["ingest"], creds.tokens["operator"]])
            label, token, auth_fail = self._token(good_token)
            if label == "good" and rng.random() < 0.1:
                token, auth_fail, label = creds.tokens["viewer"], FORBIDDEN, "viewer"
            good = {
                "event_id": f"tool-{self._key()}",
                "step": creds.tool_step,
                "status": "succeeded",
                "output": {"ok": True},
            }
            variant = rng.choice(["json", "json", "field", "field", "field", "media", "size"])
            variant = rng.choice([variant, "unknown-run"])
            body = json.dumps(good).encode()
            ctype: str | None = "application/json"
            chunked, padding = False, 0
            run_id = creds.tool_run
            outcome: Expect
            if variant == "json":
                variant, body = self._bad_json()
                outcome = BAD
            elif variant == "field":
                name, value = rng.choice(
                    [
                        ("event_id", None),
                        ("event_id", ""),
                        ("event_id", "e" * 257),
                        ("event_id", 5),
                        ("step", None),
                        ("step", "s" * 129),
                        ("step", ["diagnose"]),
                        ("status", "weird"),
                        ("status", None),
                        ("status", 1),
                        ("error", 5),
                        ("error", {"x": 1}),
                    ]
                )
                bad: dict[str, Any] = dict(good)
                if value is None:
                    bad.pop(name)
                else:
                    bad[name] = value
                if name == "error":
                    bad["status"] = "failed"
                body = json.dumps(bad).encode()
                variant = f"field-{name}"
                outcome = BAD
            elif variant == "media":
                ctype = rng.choice([None, "text/plain", "application/xml"])
                outcome = MEDIA_TYPE
            elif variant == "size":
                chunked = rng.random() < 0.5
                padding = creds.max_body_bytes + 100 - len(body)
                outcome = TOO_LARGE
            else:
                run_id = self._run_id_trick()
                outcome = NOT_FOUND
            expect = auth_fail or outcome
            if no_route(run_id):
                expect = either(NOT_FOUND, METHOD)
            return one(
                self._api_request(
                    "tool-result",
                    f"{variant}-{label}",
                    "POST",
                    f"{project}/runs/{run_id}/tool-results",
                    expect,
                    False,
                    token=token,
                    body=body,
                    content_type=ctype,
                    chunked=chunked,
                    padding=padding,
                )
            )

        # Approval decisions: the token's role (401) → content type (415) → size (413) →
        # JSON (400) → decision and fields (400) → token format (404) → the approval (404
        # unknown or bound elsewhere, 403 a role the step does not allow). Never the
        # real token with its own run and step and an allowed role: none can be decided.

        def approval() -> Case:
            good_token = rng.choice([creds.tokens["operator"], creds.tokens["admin"]])
            label, token, auth_fail = self._token(good_token)
            forbidden = label == "good" and rng.random() < 0.15
            if forbidden:
                label = rng.choice(["viewer", "ingest"])
                token = creds.tokens[label]
            approval_token = creds.approval_token
            variant = rng.choice(
                ["json", "decision", "field", "wrong-run", "wrong-step", "token", "token"]
                + ["media", "size"]
            )
            decision: dict[str, Any] = {"decision": rng.choice(["approve", "reject"])}
            body = b""
            ctype: str | None = "application/json"
            chunked, padding = False, 0
            outcome: Expect
            if variant == "json":
                variant, body = self._bad_json()
                outcome = BAD
            elif variant == "decision":
                decision["decision"] = rng.choice(["maybe", None, 1, "APPROVE", ["approve"]])
                outcome = BAD
            elif variant == "field":
                name = rng.choice(["actor", "comment", "step", "run_id"])
                if name == "run_id":
                    decision["run_id"] = rng.choice(["x", 5, "123", "", ["a"]])
                else:
                    decision[name] = rng.choice(["", "   ", 5, ["x"], "a" * 2001])
                variant = f"field-{name}"
                outcome = BAD
            elif variant == "wrong-run":
                decision["run_id"] = rng.choice(
                    [
                        str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                        creds.pending_run,
                        creds.other_run,
                    ]
                )
                outcome = (
                    either(NOT_FOUND, refused(errors.ApprovalForbidden))
                    if forbidden
                    else (NOT_FOUND)
                )
            elif variant == "wrong-step":
                decision["step"] = rng.choice(["other", "prepare", creds.approval_step + "x"])
                outcome = (
                    either(NOT_FOUND, refused(errors.ApprovalForbidden))
                    if forbidden
                    else (NOT_FOUND)
                )
            elif variant == "token":
                approval_token = rng.choice(
                    [
                        base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("="),
                        creds.approval_token[:-1],
                        creds.approval_token + "A",
                        "..%2f..%2fhealthz",
                        "%2e%2e",
                        quote("ü" * 43),
                        "A" * 3000,
                        "%00" * 43,
                        creds.approval_token[:-1] + "%00",
                    ]
                )
                outcome = NOT_FOUND
                if forbidden:
                    outcome = either(NOT_FOUND, refused(errors.ApprovalForbidden))
            elif variant == "media":
                ctype = rng.choice([None, "text/plain", "application/x-www-form-urlencoded"])
                outcome = MEDIA_TYPE
            else:
                chunked = rng.random() < 0.5
                padding = creds.max_body_bytes + 10 - len(json.dumps(decision))
                outcome = TOO_LARGE
            body = body or json.dumps(decision).encode()
            expect = auth_fail or outcome
            if no_route(approval_token):
                expect = either(NOT_FOUND, METHOD)
            return one(
                self._api_request(
                    "approval",
                    f"{variant}-{label}",
                    "POST",
                    f"{project}/approvals/{approval_token}",
                    expect,
                    False,
                    token=token,
                    body=body,
                    content_type=ctype,
                    chunked=chunked,
                    padding=padding,
                )
            )

        def unknown_webhook() -> Case:
            channel = rng.choice(["slack", "api", "TELEGRAM", "telegram%00", "..", "x" * 300])
            return one(
                self._api_request(
                    "webhook-unknown",
                    "unknown-channel",
                    "POST",
                    f"{project}/webhooks/{channel}",
                    NOT_FOUND,
                    False,
                    token=None,
                    body=b"{}",
                    content_type="application/json",
                )
            )

        return [
            (18, "runs-read/run", read_run),
            (10, "runs-read/list", list_runs),
            (26, "management", management),
            (22, "tool-result", tool_result),
            (22, "approval", approval),
            (2, "webhook-unknown", unknown_webhook),
        ]

    def _event_query(self, run_id: str) -> tuple[str, Expect | None]:
        rng = self.rng
        try:
            bound = {
                "b": params.list_scope(
                    "events", self.creds.project_id, {"run": str(uuid.UUID(unquote(run_id)))}
                )
            }
        except ValueError:  # not a UUID: the cursor is only checked for its form
            bound = {}
        choice = rng.choice(
            [
                ("?limit=10", None),
                ("?limit=0", BAD),
                ("?limit=201", BAD),
                ("?limit=-1", BAD),
                ("?limit=" + "9" * 40, BAD),
                ("?limit=%D9%A3", BAD),
                ("?limit=1&limit=2", BAD),
                ("?cursor=garbage%00", BAD),
                ("?cursor=" + _cursor({"k": "events", "s": 2**63, **bound}), None),
                ("?cursor=" + _cursor({"k": "events", "s": 10**30, **bound}), None),
                ("?cursor=" + _cursor({"k": "events", "s": -1, **bound}), BAD),
                ("?cursor=" + _cursor({"k": "events", "s": "1", **bound}), BAD),
                ("?cursor=" + _cursor({"k": "runs", "s": 1}), BAD),
                ("?cursor=" + "A" * 513, BAD),
                ("?unknown=1", BAD),
            ]
        )
        return choice

    def _list_query(self, which: str) -> tuple[str, Expect | None]:
        rng = self.rng
        # A cursor of this list and project, without filters (as the queries below have none).
        bound = params.list_scope(which, self.creds.project_id, {})
        good_cursor = _cursor(
            {"k": which, "b": bound, "t": "2026-01-01T00:00:00+00:00", "r": str(uuid.UUID(int=1))}
        )
        common = [
            ("", None),
            ("?limit=1", None),
            ("?limit=200", None),
            ("?limit=0", BAD),
            ("?limit=201", BAD),
            ("?limit=" + "1" * 30, BAD),
            ("?limit=%EF%BC%91", BAD),
            ("?cursor=" + good_cursor, None),
            ("?cursor=%00", BAD),
            ("?cursor=" + _cursor({"k": which, "t": "x", "r": 1}), BAD),
            (
                "?cursor="
                + _cursor(
                    {"k": which, "t": "9999-12-31T23:59:59-23:59", "r": str(uuid.UUID(int=1))}
                ),
                BAD,
            ),
            (
                "?cursor="
                + _cursor(
                    {"k": which, "t": "0001-01-01T00:00:00+14:00", "r": str(uuid.UUID(int=1))}
                ),
                BAD,
            ),
            (
                "?cursor="
                + _cursor(
                    {
                        "k": which,
                        "b": bound,
                        "t": "0001-01-01T05:00:00+04:00",
                        "r": str(uuid.UUID(int=1)),
                    }
                ),
                None,
            ),
            ("?cursor=" + _cursor({"k": which, "t": None, "r": None}), BAD),
            ("?cursor=" + _cursor([1, 2]), BAD),
            ("?cursor=" + base64.urlsafe_b64encode(b"[" * 380).decode().rstrip("="), BAD),
            ("?bogus=1", BAD),
        ]
        if which == "runs":
            common += [
                ("?status=PENDING,RUNNING", None),
                ("?status=BOGUS", BAD),
                ("?status=%00", BAD),
                ("?status=", BAD),
                ("?saga_status=COMPLETED&status=FAILED", None),
                ("?workflow=" + "w" * 129, BAD),
                ("?workflow=a%00b", BAD),
                ("?workflow=" + quote("ワークフロー"), None),
                ("?channel=slack", BAD),
                ("?channel=api&channel=line", BAD),
                ("?created_from=yesterday", BAD),
                ("?created_from=2026-01-01T00:00:00", BAD),
                (
                    "?created_from=2026-01-01T00:00:00Z&created_until=2027-01-01T00:00:00%2B05:00",
                    None,
                ),
                ("?created_until=9999-12-31T23:59:59-23:59", BAD),
                ("?created_from=0001-01-01T00:00:00%2B14:00", BAD),
                ("?created_from=0001-01-01T00:00:00Z", None),
                ("?created_from=" + "2" * 1000, BAD),
                ("?created_from=1e400", BAD),
            ]
        return rng.choice(common)

    # -- the mix ----------------------------------------------------------------------------

    def cases(self, total: int) -> list[Case]:
        """Cases adding up to exactly ``total`` requests."""
        weights = [w for w, _, _ in self._builders]
        out: list[Case] = []
        count = 0
        while count < total:
            _, _, build = self.rng.choices(self._builders, weights)[0]
            case = build()
            if count + len(case.requests) > total:
                continue
            out.append(case)
            count += len(case.requests)
        for case in out:
            for request in case.requests:
                line = len(request.method) + len(request.target) + len(" HTTP/1.1") + 1
                assert line <= MAX_REQUEST_LINE, request.describe()
        return out


def _cursor(data: Any) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def requests_of(cases: list[Case]) -> Iterator[HostileRequest]:
    for case in cases:
        yield from case.requests
