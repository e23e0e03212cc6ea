"""gunicorn's access logger with approval tokens taken out of request paths.

An approval token travels in the path of ``POST …/approvals/{token}`` (DESIGN §5: a token in
a URL path must be redacted from access logs). The format logs paths only, never query strings
or headers, so the path is the one place a secret could reach the access log.
"""

from __future__ import annotations

import re
from typing import Any

from gunicorn.glogging import Logger

_APPROVAL_PATH = re.compile(r"(/approvals/)[^/?#\s]+")


def redact_path(path: str) -> str:
    return _APPROVAL_PATH.sub(r"\1[redacted]", path)


class RedactingLogger(Logger):
    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        for key in ("U", "r"):
            if key in atoms:
                atoms[key] = redact_path(atoms[key])
        return atoms
