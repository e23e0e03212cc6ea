"""One provider call over HTTP, ended by a deadline on the whole send.

The outbox holds a claimed message for ``2 × outbox_send_timeout_seconds + 5`` s; a send
still running after that may be claimed and sent again by another sender. ``requests``'
timeout bounds each socket operation, not the send: a provider that trickles its answer one
byte per second, each within the timeout, could keep it for ever. So the response is
streamed and the whole send ends at a monotonic deadline of ``timeout`` seconds:

- a 2xx answer is all we need, so its body is not read at all;
- the body of any other answer is read only for the error text, at most
  ``ERROR_TEXT_BYTES``, one socket read at a time, and no further once the deadline has
  passed (the status is known: the send is judged by it, with what text came in time).

A read that starts before the deadline can end up to one read timeout after it; the hold's
``2 × timeout + 5`` leaves room for that and for recording the outcome. What this cannot
bound is a provider trickling its status line and headers: http.client reads those before
the caller gets control, each read bounded by the timeout only.

When AwoooP makes spans, the call carries the current span's ``traceparent``
(:func:`awooop.telemetry.outbound_headers`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests
import urllib3

from awooop import telemetry
from awooop.outbound.adapters import ProviderCall

ERROR_TEXT_BYTES = 1024
_READ_BYTES = 256


@dataclass(frozen=True)
class Answer:
    status: int
    text: str  # the start of the body of a non-2xx answer; empty for a 2xx


def post(call: ProviderCall, timeout: float) -> Answer:
    """POST the call; raises ``requests.RequestException`` when no answer came."""
    deadline = time.monotonic() + timeout
    with requests.post(
        call.url,
        data=call.encoded(),
        headers={
            "Content-Type": "application/json",
            **telemetry.outbound_headers(),
            **call.headers,
        },
        timeout=timeout,
        stream=True,
    ) as response:
        if 200 <= response.status_code < 300:
            return Answer(response.status_code, "")
        body = bytearray()
        while len(body) < ERROR_TEXT_BYTES and time.monotonic() < deadline:
            # read1: what one socket read gives, never waiting to fill a buffer.
            try:
                chunk = response.raw.read1(_READ_BYTES)
            except (urllib3.exceptions.HTTPError, OSError):
                break  # a stalled or dropped body: the status is the answer
            if not chunk:
                break
            body += chunk
        text = body[:ERROR_TEXT_BYTES].decode(response.encoding or "utf-8", errors="replace")
        return Answer(response.status_code, text)
