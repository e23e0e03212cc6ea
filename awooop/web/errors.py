"""Error handlers: every error is ``{"error": {"code", "message"}}``, never a traceback; under
a prefix registered in ``extensions["awooop"]["error_pages"]`` (the console) it is a page."""

from __future__ import annotations

import logging

from flask import Flask, current_app, jsonify, request
from sqlalchemy.exc import DBAPIError, OperationalError
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound, RequestEntityTooLarge

from awooop import errors

log = logging.getLogger("awooop.web")

_HTTP_EXCEPTIONS: dict[type[HTTPException], type[errors.AwoooPError]] = {
    NotFound: errors.NotFound,
    MethodNotAllowed: errors.MethodNotAllowed,
    RequestEntityTooLarge: errors.PayloadTooLarge,
}


def error_response(error: errors.AwoooPError):
    """The error as JSON, or as a page where a blueprint renders its own (the console)."""
    for prefix, render in current_app.extensions["awooop"].get("error_pages", ()):
        if request.path == prefix or request.path.startswith(prefix + "/"):
            return render(error)
    response = jsonify({"error": {"code": error.code, "message": error.message}})
    response.status_code = error.http_status
    for name, value in error.headers.items():
        response.headers[name] = value
    return response


def register(app: Flask) -> None:
    @app.errorhandler(errors.AwoooPError)
    def _awooop_error(error: errors.AwoooPError):
        return error_response(error)

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException):
        mapped = _HTTP_EXCEPTIONS.get(type(error))
        if mapped is not None:
            return error_response(mapped())
        generic = errors.MalformedRequest(error.description or error.name)
        generic.http_status = error.code or 400
        return error_response(generic)

    @app.errorhandler(OperationalError)
    def _database_unavailable(error: DBAPIError):
        log.error(
            "database unavailable",
            extra={"action": "database_unavailable", "error": str(error.orig)[:200]},
        )
        return error_response(errors.ServiceUnavailable())

    @app.errorhandler(DBAPIError)
    def _database_error(error: DBAPIError):
        if error.connection_invalidated:
            return _database_unavailable(error)
        log.exception("database error", extra={"action": "internal_error"})
        return error_response(errors.InternalError())

    @app.errorhandler(Exception)
    def _unexpected(error: Exception):
        log.exception("unhandled error", extra={"action": "internal_error"})
        return error_response(errors.InternalError())
