"""Reading a request body: at most ``AWOOOP_MAX_BODY_BYTES``, whatever its framing.

A body with a ``Content-Length`` over the limit is refused before anything is read. A body
sent ``Transfer-Encoding: chunked`` has no length to check, and werkzeug's stream stops
quietly at ``MAX_CONTENT_LENGTH``: ``get_data()`` returned the first 1 MiB of a longer
body, so a complete event followed by padding was admitted. Here the stream may give one
byte more than the limit; a body that has that byte is over the limit (413), never cut.
"""

from __future__ import annotations

from flask import request

from awooop import errors
from awooop.web import context


def read() -> bytes:
    """The whole body, or :class:`errors.PayloadTooLarge` (413 ``E-REQUEST-002``)."""
    limit = context.settings().max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise errors.PayloadTooLarge()
    # Before the stream is first made: it is wrapped with this limit. A request whose body
    # was already read (nothing here does) keeps the application's limit and is cut at it.
    request.max_content_length = limit + 1
    body = request.get_data(cache=True)
    if len(body) > limit:
        raise errors.PayloadTooLarge()
    return body
