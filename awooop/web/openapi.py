"""``GET /openapi.json``: the API's OpenAPI document (:mod:`awooop.web.openapi_spec`).

No credential: the document describes the API, not a project. It only changes with a
deployment, so it is rendered once per process and answered with a strong ``ETag`` and
``Cache-Control: public``: a client or proxy reuses it for a few minutes and then revalidates
with ``If-None-Match`` (304, no body).
"""

from __future__ import annotations

import functools
import hashlib
import json

from flask import Blueprint, Response, request

from awooop.web import openapi_spec

blueprint = Blueprint("openapi", __name__)

MAX_AGE_SECONDS = 300


@functools.cache
def document() -> bytes:
    """The document as compact, deterministic JSON."""
    spec = openapi_spec.build()
    return json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()


@blueprint.get("/openapi.json")
def openapi_json() -> Response:
    body = document()
    response = Response(body, mimetype="application/json")
    response.set_etag(hashlib.sha256(body).hexdigest()[:32])
    response.cache_control.public = True
    response.cache_control.max_age = MAX_AGE_SECONDS
    response.make_conditional(request)  # 304 without a body when If-None-Match matches
    return response
