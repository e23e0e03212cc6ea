"""URLs as they may be shown: passwords, and query parameters that look like one, masked.

Every message and listing that shows a configured URL goes through :func:`mask_url`: the
settings' ``repr`` and :meth:`~awooop.config.Settings.masked`, ``awooop config``, the
start-up log line and the settings checks' error messages (:mod:`awooop.config_checks`).
"""

from __future__ import annotations

import re

MASK = "***"
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:password|passwd|pwd|pass|secret|token|key|sslpassword)=)[^&;#]*"
)
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:@/]*:).*@")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)?.*@")


def mask_url(url: str) -> str:
    """``url`` with its password, and query parameters that look like one, replaced by
    ``***`` (several URLs separated by ``;`` each). SQLAlchemy renders a URL it can parse
    (``hide_password=True``); one it cannot is masked from its text alone."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    masked = []
    for part in url.split(";"):
        try:
            if part.count("@") > 1:  # an unescaped "@" in the password: not parsed right
                raise ValueError(part)
            shown = make_url(part).render_as_string(hide_password=True) if part else part
        except (ArgumentError, ValueError):
            # Unparsable: the user's name is kept when it can be told from the password.
            shown, found = _USERINFO_PASSWORD.subn(rf"\g<1>{MASK}@", part)
            if not found:
                shown = _USERINFO.sub(lambda m: f"{m.group(1) or ''}{MASK}@", part)
        masked.append(_QUERY_SECRET.sub(rf"\g<1>{MASK}", shown))
    return ";".join(masked)
