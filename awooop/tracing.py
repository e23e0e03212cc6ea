"""W3C Trace Context: the ``traceparent`` header a caller may send with an event.

AwoooP does not trace spans itself; it keeps the caller's trace context so a run can be found
from a trace and a trace from a run. A valid header is stored on the run at admission
(``awooop_run_state.traceparent``) and every log line a worker writes about that run carries
it. An invalid header is ignored, never an error: a provider's tracing bug must not lose its
event (https://www.w3.org/TR/trace-context/#traceparent-header, "parse and validate").
"""

from __future__ import annotations

import re

# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex only. A future version
# may append "-"-separated fields; version 00 may not.
_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace_id>[0-9a-f]{32})-(?P<parent_id>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?"
)
_ZERO_TRACE_ID = "0" * 32
_ZERO_PARENT_ID = "0" * 16
# Longer headers are not ours to parse (the column holds the version-00 form: 55 chars).
MAX_HEADER_LENGTH = 512


def parse_traceparent(header: str | None) -> str | None:
    """The header as a version-00 ``traceparent``, or None when absent or invalid.

    Invalid: not lowercase hex in the 2-32-16-2 layout, version ``ff``, an all-zero trace
    id or parent id, or version 00 with trailing fields. A higher version is read as
    version 00 (the specification's forward compatibility rule) and stored as such.
    """
    if not header or len(header) > MAX_HEADER_LENGTH:
        return None
    match = _TRACEPARENT.fullmatch(header.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.group(
        "version", "trace_id", "parent_id", "flags", "rest"
    )
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE_ID or parent_id == _ZERO_PARENT_ID:
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"
