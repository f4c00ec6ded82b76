"""Error answers of the II and the local actor API: refused operations and HTTP 400 bodies.

:class:`IIError` and its subclasses are what an operation raises to refuse a request; the server
answers with their ``status`` and ``{"error", "field"?}``.

:func:`validation_error_body` turns a pydantic ``ValidationError`` into
``{"error": "subscriptions.0.selector: Field required", "field": "subscriptions.0.selector"}``:
the first problem only, with the dotted path of the offending property (list indexes as
numbers; the ``messageType`` tag of the application union is left out of the path), and
``(+N more)`` when there were more. Malformed JSON and a body that is not an object have no
field (``"field"`` is omitted).
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ii_api.wire.models import APPLICATION_TAGS, WireModel

__all__ = ["BadRequest", "Conflict", "ErrorBody", "Forbidden", "IIError", "NotFound", "TooLarge", "describe_validation_error",
           "error_field", "validation_error_body"]


class IIError(Exception):
    """An operation refused; the server answers ``status`` with ``{"error", "field"?}``."""

    status = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class BadRequest(IIError):
    status = 400


class Forbidden(IIError):
    status = 403


class NotFound(IIError):
    status = 404


class Conflict(IIError):
    status = 409


class TooLarge(IIError):
    """A request over this interchange's size bounds (bounded per operation)."""

    status = 413


class ErrorBody(WireModel):
    """Body of an HTTP 4xx/5xx answer."""

    error: str
    field: str | None = None


_UNION_TAGS = APPLICATION_TAGS


def error_field(loc: tuple[int | str, ...]) -> str | None:
    """Dotted path of an error location, without union tags; None for the whole body."""
    parts: list[str] = []
    for index, item in enumerate(loc):
        # The discriminated application union puts the chosen tag after "application".
        if isinstance(item, str) and item in _UNION_TAGS and index > 0 and loc[index - 1] in ("application",):
            continue
        parts.append(str(item))
    return ".".join(parts) or None


def _message(error: ErrorDetails) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        return f"invalid JSON: {error.get('ctx', {}).get('error', error.get('msg', ''))}"
    if kind in ("model_type", "model_attributes_type", "dict_type") and not error.get("loc"):
        return "the body must be a JSON object"
    message = str(error.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return message


def describe_validation_error(exc: ValidationError) -> tuple[str, str | None]:
    """(short message, dotted field path or None) for the first error of ``exc``."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "invalid body", None
    first = errors[0]
    field = error_field(tuple(first.get("loc", ())))
    text = _message(first)
    if field:
        text = f"{field}: {text}"
    if len(errors) > 1:
        text += f" (+{len(errors) - 1} more)"
    return text, field


def validation_error_body(exc: ValidationError) -> dict[str, Any]:
    """The JSON object to answer with HTTP 400."""
    message, field = describe_validation_error(exc)
    return ErrorBody(error=message, field=field).to_json()
