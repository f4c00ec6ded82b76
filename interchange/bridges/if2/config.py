"""Configuration of the IF2 bridge (the ``[if2]`` section of the node config).

The IF2 RabbitMQ and its virtual host (IF2 6.1) and the bridge's client certificate, the provider
table (name <-> publisherId, coverage), binding keys per exchange for imports and exports (IF2
6.4), the area radius per exchange (IP_112/113), Table 3's queue limits (IF2 6.3:
``queue_max_length``, ``queue_message_ttl_ms``) and where rejected messages go
(``dead_letter_exchange``, else the vhost's policy). The example block and the keys:
docs/if2-bridge.md ("The ``[if2]`` section").
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from interchange.bridges.if2.bindings import bindings_selector
from interchange.bridges.if2.keys import IF2_TO_CROADS, If2KeyError, ProviderTable

#: IF2 -> C-Roads area radius by default: IP_113's example (1 km, at most 9 tiles of zoom 14).
DEFAULT_AREA_RADIUS_M = 1000.0
#: IP_112's example of the largest area (5 km, at most 36 tiles of zoom 13).
MAX_AREA_RADIUS_M = 5000.0

__all__ = ["If2Config", "If2Provider", "If2Tls"]


class If2Tls(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cert_chain: Path
    key: Path
    trust_bundle: Path


class If2Provider(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    publisher_id: str
    coverage: list[str] = Field(min_length=1, description="quadtree tiles of the capabilities (IF2 FILTER01)")

    @field_validator("coverage")
    @classmethod
    def _tiles(cls, tiles: list[str]) -> list[str]:
        for tile in tiles:
            if not tile or set(tile) - set("0123") or len(tile) > 18:
                raise ValueError(f"coverage tile {tile!r} is not 1-18 digits 0-3")
        return tiles


class If2Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^amqps?://", description="amqps://host:port/vhost of the IF2 RabbitMQ")
    server_name: str | None = None
    auth: Literal["external", "plain"] = "external"
    username: str | None = None
    password: str | None = None
    actor: str = Field(min_length=1, description="the bridge's actor CN (its certificate's)")
    tls: If2Tls
    providers: list[If2Provider] = Field(min_length=1)
    imports: dict[str, list[str]] = Field(default_factory=dict)
    exports: dict[str, list[str]] = Field(default_factory=dict)
    queue_max_length: int = Field(default=10_000, ge=1, description="IF2 6.3: queues MUST have a maximum length")
    queue_message_ttl_ms: int = Field(default=600_000, ge=1, description="IF2 6.3: SHOULD have a maximum TTL")
    prefetch: int = Field(default=256, ge=1, le=65535)
    republish_interval_s: float = Field(default=3600.0, gt=0, le=3600.0)
    default_validity_s: float = Field(default=86400.0, gt=0)
    bi_door: Literal["amqps", "in-process"] = Field(default="in-process", description=(
        "how IF2 messages go into the node's broker: through its in-process door (the same identity, "
        "authorization, records and outcomes, no TLS hop inside the process), or over AMQPS like any actor; "
        "exports come over AMQPS either way"))
    reconnect_min_s: float = Field(default=0.2, gt=0)
    reconnect_max_s: float = Field(default=10.0, gt=0)
    bi_attempts: int = Field(default=10, ge=1, description="sends of one IF2 message to the BI that go unanswered "
                             "(connection or link lost) or released before it is given up (rejected at RabbitMQ)")
    dead_letter_exchange: str | None = Field(
        default=None, min_length=1, description="x-dead-letter-exchange of the bridge's queues: where RabbitMQ puts "
                                                "what the bridge rejects (else the vhost's policy, if any)")
    area_radius_m: dict[str, float] = Field(
        default_factory=lambda: dict.fromkeys(IF2_TO_CROADS, DEFAULT_AREA_RADIUS_M),
        description="IF2 -> C-Roads, per exchange: the radius (m, 0-5000) around a message's lat/lon whose tiles of "
                    "its type's area zoom join its quadTree (IP_112: zoom 13, IP_113: zoom 14); IF2 carries no area")
    capability_idle_s: float | None = Field(
        default=86400.0, gt=0, description="withdraw the capability registered for IF2 data of a provider, type and "
                                           "version after this long without a message of it (null: never)")

    @model_validator(mode="after")
    def _consistent(self) -> "If2Config":
        for exchange in (*self.imports, *self.exports, *self.area_radius_m):
            if exchange not in IF2_TO_CROADS:
                raise ValueError(f"exchange {exchange!r} is not an IF2 exchange ({', '.join(IF2_TO_CROADS)})")
        for exchange, radius in self.area_radius_m.items():
            if not 0.0 <= radius <= MAX_AREA_RADIUS_M:
                raise ValueError(f"area_radius_m.{exchange} = {radius}: 0 to {MAX_AREA_RADIUS_M:g} m (IP_112's "
                                 "largest area, 36 tiles of zoom 13)")
        if self.auth == "plain" and (self.username is None or self.password is None):
            raise ValueError("auth = 'plain' needs username and password")
        try:
            self.export_selector()
        except If2KeyError as exc:
            raise ValueError(str(exc)) from None
        return self

    def provider_table(self) -> ProviderTable:
        return ProviderTable.of((p.name, p.publisher_id) for p in self.providers)

    def export_selector(self) -> str:
        """The BI selector equivalent to the export binding keys."""
        return bindings_selector(self.exports, self.provider_table())

    def resolve(self, base: Path) -> "If2Config":
        def fix(p: Path) -> Path:
            return p if p.is_absolute() else base / p

        tls = self.tls.model_copy(update={"cert_chain": fix(self.tls.cert_chain), "key": fix(self.tls.key),
                                          "trust_bundle": fix(self.tls.trust_bundle)})
        return self.model_copy(update={"tls": tls})
