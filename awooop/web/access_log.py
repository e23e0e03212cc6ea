"""gunicorn's access logger: one JSON line per request, with approval tokens taken out of
request paths.

An approval token travels in the path of ``POST …/approvals/{token}`` (a token in a
URL path must be redacted from access logs). The line carries the method, the path, the
status, the size and the time — never the query string or a header — so the path is the one
place a secret could reach the access log.
"""

from __future__ import annotations

import re
import traceback
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

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        # gunicorn logs every request once a logconfig_dict is set; AWOOOP_ACCESS_LOG=0 (no
        # accesslog) still means none.
        if not self.cfg.accesslog:
            return
        atoms = self.atoms(resp, req, environ, request_time)
        fields = {
            "action": "http_request",
            "method": atoms["m"],
            "path": atoms["U"],
            "status": int(atoms["s"]),
            "bytes": atoms["B"],
            "duration_ms": atoms["M"],
            "remote_addr": atoms["h"],
        }
        try:
            self.access_log.info(
                self.cfg.access_log_format, self.atoms_wrapper_class(atoms), extra=fields
            )
        except Exception:
            self.error(traceback.format_exc())
