"""The error catalogue: every code a client can see, its HTTP status, and its message.

Each exception's docstring is its default message. Views raise these; the web layer turns
them into ``{"error": {"code": ..., "message": ...}}`` with the status given here.
"""

from __future__ import annotations


class AwoooPError(Exception):
    """An AwoooP error."""

    code = "E-INTERNAL-001"
    http_status = 500
    headers: dict[str, str] = {}

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(self.message)


class _RetryLater(AwoooPError):
    """Refused for now; the ``Retry-After`` header says when to try again."""

    http_status = 429

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(max(1, int(retry_after)))}


class Unauthenticated(AwoooPError):
    """Missing or invalid credentials or signature."""

    code = "E-AUTH-001"
    http_status = 401


class Forbidden(AwoooPError):
    """This API token's role does not allow this request."""

    code = "E-AUTH-002"
    http_status = 403


class MalformedRequest(AwoooPError):
    """The request body is not valid for this endpoint."""

    code = "E-REQUEST-001"
    http_status = 400


class PayloadTooLarge(AwoooPError):
    """The request body is larger than the configured limit."""

    code = "E-REQUEST-002"
    http_status = 413


class UnsupportedMediaType(AwoooPError):
    """The request body must be application/json."""

    code = "E-REQUEST-003"
    http_status = 415


class NotFound(AwoooPError):
    """No such resource."""

    code = "E-NOT-FOUND-001"
    http_status = 404


class MethodNotAllowed(AwoooPError):
    """This method is not allowed on this resource."""

    code = "E-REQUEST-004"
    http_status = 405


class MissingIdempotencyKey(AwoooPError):
    """One Idempotency-Key header is required: 1 to 255 visible ASCII characters, no comma."""

    code = "E-IDEMPOTENT-003"
    http_status = 400


class IdempotencyKeyReused(AwoooPError):
    """This idempotency key was already used with a different request body."""

    code = "E-IDEMPOTENT-002"
    http_status = 422


# Not an error: the code a duplicate admission is answered with (HTTP 200).
DUPLICATE_EVENT_CODE = "E-IDEMPOTENT-001"


class RunFinished(AwoooPError):
    """The run is finished: it takes no more signals."""

    code = "E-SIGNAL-001"
    http_status = 409


class TooManySignals(AwoooPError):
    """This run already keeps the most signals a run may keep."""

    code = "E-SIGNAL-002"
    http_status = 409


class WorkflowNotAllowed(AwoooPError):
    """This workflow is not allowed in this project (routed for a channel or allowed by name)."""

    code = "E-WORKFLOW-001"
    http_status = 422


class WorkflowVersionUnknown(AwoooPError):
    """This version of the workflow is not registered."""

    code = "E-WORKFLOW-002"
    http_status = 422


class UnknownToolStep(AwoooPError):
    """The run's workflow has no step of this name."""

    code = "E-TOOL-001"
    http_status = 422


class OperationRefused(AwoooPError):
    """The run is not in a state that allows this operation."""

    code = "E-OPERATION-001"
    http_status = 409


class VersionMismatch(AwoooPError):
    """The run changed since the version you expected (If-Match)."""

    code = "E-OPERATION-002"
    http_status = 412


class ManualCloseDisabled(AwoooPError):
    """Manual close is disabled; enable it with AWOOOP_MANUAL_CLOSE_ENABLED=1."""

    code = "E-OPERATION-003"
    http_status = 409


class InvalidOperation(AwoooPError):
    """Unknown operation, or a missing operation id or actor."""

    code = "E-OPERATION-004"
    http_status = 400


class OperationIdReused(AwoooPError):
    """This operation_id was already used for another operation on this run."""

    code = "E-OPERATION-005"
    http_status = 422


class RerunRefused(AwoooPError):
    """Only a finished run (COMPLETED, FAILED or CANCELLED) can be rerun."""

    code = "E-RERUN-001"
    http_status = 409


class FormRefused(AwoooPError):
    """This form has expired or did not come from this console; reload the page and try again."""

    code = "E-CONSOLE-001"
    http_status = 400


class RunChanged(AwoooPError):
    """The run changed since you looked at it, so nothing was done; review it and try again."""

    code = "E-CONSOLE-002"
    http_status = 409


class ApprovalExpired(AwoooPError):
    """This approval has expired; the run has failed with E-APPROVAL-002."""

    code = "E-APPROVAL-002"
    http_status = 410


class ApprovalClosed(AwoooPError):
    """This approval was already decided, or its run no longer waits for it."""

    code = "E-APPROVAL-003"
    http_status = 409


class ApprovalForbidden(AwoooPError):
    """You may not decide this approval."""

    code = "E-APPROVAL-004"
    http_status = 403


class ActiveRunQuotaExceeded(_RetryLater):
    """The project has as many active runs as its quota allows; retry when some have finished."""

    code = "E-QUOTA-001"


class RateLimited(_RetryLater):
    """Too many requests of this kind for this project; retry after the indicated delay."""

    code = "E-RATE-001"


class ServiceUnavailable(AwoooPError):
    """The database is unavailable; retry later."""

    code = "E-UNAVAILABLE-001"
    http_status = 503
    headers = {"Retry-After": "5"}


class InternalError(AwoooPError):
    """Internal error; it has been logged."""

    code = "E-INTERNAL-001"
    http_status = 500


# The codes a run's ``failure_code`` can hold: why it failed, was cancelled or waits for a
# person (never an HTTP answer). The metrics label failed runs with these and nothing else.
RUN_FAILURE_CODES = {
    "E-STEP-001": "a step rejected its input or outcome",
    "E-STEP-002": "a step's retries were exhausted",
    "E-STEP-003": "a step's outcome is unknown and its resolver could not settle it",
    "E-STEP-004": "a step returned a value the journal cannot hold",
    "E-STEP-005": "a wait for a signal ended without it",
    "E-SAGA-001": "the saga needs a person (manual intervention)",
    "E-SAGA-002": "an operator cancelled the run",
    "E-SAGA-003": "the run deadline passed",
    "E-SAGA-004": "two different outcomes were reported for one attempt",
    "E-APPROVAL-001": "a person rejected an approval",
    "E-APPROVAL-002": "nobody decided an approval within its TTL",
    "E-RUN-001": "the run's stored input or journal cannot be loaded",
    "E-RUN-002": "the database refused one of the run's writes for good",
    "E-RUN-003": "no worker had the run's workflow definition for too long",
    "E-LEASE-001": "the run's workers died more often than its attempts allow",
}
