"""Calling a project's automation endpoint (``config.actions_url``) from a step.

Every call carries the step's ``effect_id`` as ``Idempotency-Key`` (and, when AwoooP makes
spans, the step's ``traceparent``), so a retried or
re-executed step asks for the same effect and the endpoint can answer it once. A 4xx answer
is the endpoint saying no (a :class:`~awooop.domain.workflow.Reject`: compensate); a 5xx or
a network failure is transient (the step's retry policy applies). One JSON POST needs no
more than the standard library's ``urllib``, which this module uses; AwoooP's other HTTP
calls (its client, its command line, outbound messages) use ``requests``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from awooop.domain.workflow import Reject, StepContext

TIMEOUT_SECONDS = 10.0


class ActionUnavailable(Exception):
    """The automation endpoint failed or could not be reached (transient)."""


def actions_url(ctx: StepContext) -> str:
    url = (ctx.input.get("project") or {}).get("actions_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise Reject(
            "the project has no actions_url configured "
            "(awooop project config <project> actions_url=https://...)"
        )
    return url.rstrip("/")


def post(ctx: StepContext, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    """POST ``body`` as JSON to ``{actions_url}/{path}``; the decoded JSON answer."""
    headers = {"Content-Type": "application/json", "Idempotency-Key": key or ctx.effect_id}
    if ctx.traceparent:
        headers["traceparent"] = ctx.traceparent
    request = urllib.request.Request(  # noqa: S310 - http(s) only, checked in actions_url()
        f"{actions_url(ctx)}/{path}",
        data=json.dumps({"run_id": ctx.run_id, **body}).encode(),
        method="POST",
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
            payload = response.read()
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500:
            raise Reject(f"{path}: the automation endpoint refused ({exc.code})") from None
        raise ActionUnavailable(f"{path}: the automation endpoint failed ({exc.code})") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise ActionUnavailable(f"{path}: {exc}") from None
    try:
        return json.loads(payload) if payload else {}
    except ValueError:
        return {"raw": payload.decode(errors="replace")[:1000]}
