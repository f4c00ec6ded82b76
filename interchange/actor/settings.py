"""Connection settings of a C-ITS actor: which interchange, where its II is, and the actor's TLS files.

One small file (TOML or JSON, relative paths read from the file's folder) or arguments: ``node``
(its certificate's CN, IP_125), ``ii_url`` or ``[discovery]`` (IP_086 SRV records), ``cert_chain``
(IP_057), ``key``, ``trust_bundle`` (IP_115/116), ``crls``. The Basic Interface endpoint is not
configured: the node hands it out. Mutual TLS 1.3 with the node's TLS settings
(:func:`certs.tls.client_context`); the node's certificate must name ``node``. The file:
docs/actors.md.
"""
from __future__ import annotations

import json
import ssl
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from certs.tls import TlsFiles, client_context
from interchange.actor.errors import ActorError

__all__ = ["ActorSettings", "DnsDiscovery", "load_settings"]


class DnsDiscovery(BaseModel):
    """Where to look the node up: the SRV records of ``_ixc._tcp.<domain>`` at ``dns_server``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: str = Field(min_length=1)
    dns_server: str = "127.0.0.1"
    dns_port: int = Field(default=53, ge=1, le=65535)
    base_path: str = ""  #: the II's base path (DNS gives host and port only)


class ActorSettings(BaseModel):
    """Everything an actor needs to reach its interchange (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str = Field(min_length=1, description="the interchange's name (its certificate's common name)")
    ii_url: str | None = Field(default=None, description="https://host:port[/base path] of its II")
    discovery: DnsDiscovery | None = None
    cert_chain: Path
    key: Path
    trust_bundle: Path
    crls: tuple[Path, ...] = ()
    timeout_s: float = Field(default=10.0, gt=0)

    @field_validator("ii_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"must be https://host:port[/base], got {value!r}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_way_to_the_ii(self) -> ActorSettings:
        if (self.ii_url is None) == (self.discovery is None):
            raise ValueError("give either ii_url or [discovery] (the node's II URL, or where DNS names it)")
        return self

    @property
    def files(self) -> TlsFiles:
        return TlsFiles(self.cert_chain, self.key, self.trust_bundle, self.crls)

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS 1.3 client context (mutual TLS); a missing or unreadable file is an ActorError."""
        try:
            self.files.check()
            return client_context(self.files)
        except FileNotFoundError as exc:
            raise ActorError(f"TLS file missing: {exc}", "check cert_chain, key, trust_bundle and crls in the "
                             "settings") from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise ActorError(f"cannot load the TLS files: {exc}", "cert_chain and key must be PEM and belong "
                             "together; trust_bundle must hold the root") from None

    def with_paths_from(self, folder: Path) -> ActorSettings:
        """Relative file paths read from ``folder`` (the settings file's)."""
        def resolve(path: Path) -> Path:
            return path if path.is_absolute() else folder / path
        return self.model_copy(update={"cert_chain": resolve(self.cert_chain), "key": resolve(self.key),
                                       "trust_bundle": resolve(self.trust_bundle),
                                       "crls": tuple(resolve(p) for p in self.crls)})

    def to_toml(self) -> str:
        """The settings as a small TOML file (what :func:`load_settings` reads)."""
        lines = [f"node = {json.dumps(self.node)}"]
        if self.ii_url is not None:
            lines.append(f"ii_url = {json.dumps(self.ii_url)}")
        lines += [f"cert_chain = {json.dumps(str(self.cert_chain))}", f"key = {json.dumps(str(self.key))}",
                  f"trust_bundle = {json.dumps(str(self.trust_bundle))}",
                  f"crls = {json.dumps([str(p) for p in self.crls])}"]
        if self.discovery is not None:
            lines += ["", "[discovery]", *(f"{k} = {json.dumps(v)}" for k, v in self.discovery.model_dump().items())]
        return "\n".join(lines) + "\n"


def _describe(exc: ValidationError) -> str:
    errors = exc.errors()
    missing = [".".join(str(p) for p in e["loc"]) for e in errors if e["type"] == "missing"]
    if missing:
        return f"missing {', '.join(missing)}"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "settings"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")


def load_settings(path: Path | None = None, **overrides: Any) -> ActorSettings:
    """The settings of ``path`` (TOML, or JSON for ``*.json``) with ``overrides`` (None values
    ignored) on top; without a file, the overrides alone."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except OSError as exc:
            raise ActorError(f"cannot read the settings {path}: {exc.strerror or exc}",
                             "give --config FILE (see docs/actors.md)") from None
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            kind = "JSON" if path.suffix == ".json" else "TOML"
            raise ActorError(f"settings {path}: not valid {kind}: {exc}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    if not data:
        raise ActorError("no settings", "give --config FILE, set $INTERCHANGE_ACTOR_CONFIG or put an actor.toml "
                         "here (docs/actors.md)")
    try:
        settings = ActorSettings.model_validate(data)
    except ValidationError as exc:
        raise ActorError(f"settings{' ' + str(path) if path else ''}: {_describe(exc)}",
                         "see docs/actors.md for the settings file") from None
    return settings.with_paths_from(path.parent) if path is not None else settings
