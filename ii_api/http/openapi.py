"""The OpenAPI 3.1 document of the II and local actor API, generated from the route table and the
pydantic models' JSON schemas (so it cannot drift from what the server accepts and answers)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ii_api.wire.errors import ErrorBody

__all__ = ["Operation", "openapi_document"]

_STATUS_TEXT = {200: "OK", 202: "Accepted", 204: "No Content", 400: "Bad Request: malformed JSON or wrong types "
                "(the error names the field)", 403: "Forbidden: the client certificate may not do this",
                404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large",
                500: "Internal Server Error"}


@dataclass(frozen=True)
class Operation:
    """One endpoint: how the server routes it and how the OpenAPI document describes it."""

    method: str
    path: str  #: relative to the base path, with ``{parameters}``
    handler: str  #: name of the handler method of the server
    summary: str
    tag: str
    status: int = 200
    body: type[BaseModel] | None = None
    response: tuple[type[BaseModel], ...] = ()  #: several: the answer is one of them
    errors: tuple[int, ...] = (400, 403)
    query: tuple[tuple[str, str], ...] = ()
    description: str = ""
    extra_responses: dict[int, str] = field(default_factory=dict)


def _parameters(operation: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for name in re.findall(r"{(\w+)}", operation.path):
        params.append({"name": name, "in": "path", "required": True, "schema": {"type": "string"},
                       "description": "the id of the item" if name == "id" else
                       "the client certificate's common name (403 otherwise)"})
    for name, text in operation.query:
        params.append({"name": name, "in": "query", "required": False, "schema": {"type": "string"},
                       "description": text})
    return params


def openapi_document(operations: Sequence[Operation], *, base_path: str = "", title: str, version: str,
                     description: str = "") -> dict[str, Any]:
    """The OpenAPI document for ``operations``."""
    models: list[type[BaseModel]] = [ErrorBody]
    for operation in operations:
        for model in ((operation.body,) if operation.body else ()) + operation.response:
            if model not in models:
                models.append(model)
    refs, definitions = models_json_schema([(m, "validation") for m in models],
                                           ref_template="#/components/schemas/{model}")

    def schema(choices: tuple[type[BaseModel], ...]) -> dict[str, Any]:
        if len(choices) == 1:
            return refs[(choices[0], "validation")]
        # anyOf, not oneOf: which form is answered depends on the caller (see the description),
        # and one answer may be valid under both (an empty subscriptions list is).
        return {"anyOf": [refs[(m, "validation")] for m in choices]}

    error_content = {"application/json": {"schema": refs[(ErrorBody, "validation")]}}
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        responses: dict[str, Any] = {}
        if operation.response:
            responses[str(operation.status)] = {"description": _STATUS_TEXT.get(operation.status, ""),
                                                "content": {"application/json": {"schema": schema(operation.response)}}}
        else:
            responses[str(operation.status)] = {"description": _STATUS_TEXT.get(operation.status, "")}
        for status in sorted({*operation.errors, 500}):
            responses[str(status)] = {"description": operation.extra_responses.get(status, _STATUS_TEXT.get(status, "")),
                                      "content": error_content}
        entry: dict[str, Any] = {"summary": operation.summary, "tags": [operation.tag],
                                 "operationId": operation.handler, "responses": responses}
        if operation.description:
            entry["description"] = operation.description
        parameters = _parameters(operation)
        if parameters:
            entry["parameters"] = parameters
        if operation.body is not None:
            entry["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": refs[(operation.body, "validation")]}}}
        paths.setdefault(f"{base_path}{operation.path}", {})[operation.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": {"schemas": definitions.get("$defs", {}),
                       "securitySchemes": {"mutualTLS": {"type": "mutualTLS",
                                                         "description": "TLS 1.3 client certificate (IP_069/090)"}}},
        "security": [{"mutualTLS": []}],
    }
