"""Configuration of the Improved Interface service (the ``[ii]`` section of the node config).

The profile's bounds are enforced by the models: ``poll_interval_s`` at most 5 minutes (IP_127),
``capability_repost_s`` at most 24 hours (IP_091), and in ``[ii.discovery]``
(:class:`~ii_api.peers.discovery.DiscoveryConfig`) ``interval_s`` at most 12 hours (IP_073/089);
``port`` is the HTTPS control channel, the SRV record's port (IP_090). Further sections:
``[ii.limits]`` (bounds per request, 413 beyond), ``[ii.actors]`` (IP_068,
:mod:`ii_api.decisions.actor_policy`), ``[ii.policy]`` (ILLEGAL, :mod:`ii_api.selectors.policy`),
``[ii.multihop]`` (IP_109, off by default). An annotated example: docs/configuration.md.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ii_api.decisions.actor_policy import ActorPolicy
from ii_api.peers.discovery import DiscoveryConfig
from ii_api.selectors.policy import SubscriptionPolicy
from interchange.broker.hop_trace import DEFAULT_HOP_LIMIT, MAX_HOP_LIMIT

__all__ = ["IIConfig", "MultihopConfig", "RequestLimits", "MAX_CAPABILITY_REPOST_S", "MAX_NEIGHBOUR_GRACE_S",
           "MAX_POLL_INTERVAL_S"]

MAX_POLL_INTERVAL_S = 300.0  # IP_127
MAX_CAPABILITY_REPOST_S = 24 * 3600.0  # IP_091
MAX_NEIGHBOUR_GRACE_S = 7 * 24 * 3600.0


class MultihopConfig(BaseModel):
    """Multi-hop federation: loop prevention by hop trace, and re-export of imported data.

    Off (the default), imported data is never served to another interchange (IP_109); imported
    messages whose hop trace names this interchange, or that went over the hop limit, are dropped
    all the same (:mod:`interchange.broker.hop_trace`).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="record this interchange in the hop trace of what it "
                          "imports; re-export imported data to neighbours that announce multi-hop too")
    hop_limit: int = Field(default=DEFAULT_HOP_LIMIT, ge=1, le=MAX_HOP_LIMIT,
                           description="most interchange-to-interchange hops a message may make")
    handover_overlap_s: float = Field(default=0.5, ge=0.0, le=60.0,
                                      description="a subscription moving to a new route: how long the old one "
                                      "stays after the new one is CREATED with its links connected")
    handover_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0,
                                      description="the old route is withdrawn after this long even if the new one "
                                      "never got ready")
    duplicate_window_s: float = Field(default=10.0, gt=0.0, le=3600.0,
                                      description="an imported message whose bare message a local source got "
                                      "this recently (over another route) is not offered to it again")
    duplicate_window_entries: int = Field(default=100_000, ge=1, le=10_000_000,
                                          description="most (source, message) pairs remembered for that")

    @model_validator(mode="after")
    def _window_covers_the_overlap(self) -> MultihopConfig:
        """The second copies of a handover's overlap must still be recognised when they come."""
        if self.duplicate_window_s <= self.handover_overlap_s:
            raise ValueError(f"duplicate_window_s ({self.duplicate_window_s}) must be longer than handover_overlap_s "
                             f"({self.handover_overlap_s}): the overlap's second copies arrive within it")
        return self


class RequestLimits(BaseModel):
    """Bounds per operation: a request beyond them is answered 413 with a JSON reason
    before it costs the node anything more. Capability documents are the big ones (an actor or a
    neighbour may have thousands); subscriptions and deliveries come a few at a time. Time bounds:
    a handshake, a request's headers or its body that does not arrive in time closes the
    connection (a request begun is answered 408; :mod:`ii_api.http.request_clock`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capabilities_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024,
                                         description="POST /capabilities and /{actor}/capabilities")
    body_bytes: int = Field(default=256 * 1024, ge=1024, le=64 * 1024 * 1024,
                            description="every other request body")
    capabilities_per_request: int = Field(default=5000, ge=1)
    subscriptions_per_request: int = Field(default=500, ge=1, description="also deliveries per request")
    handshake_timeout_s: float = Field(default=10.0, gt=0, le=300, description="the TLS handshake, from the "
                                       "accepted socket")
    header_timeout_s: float = Field(default=10.0, gt=0, le=300, description="a request's headers, from the "
                                    "handshake (the first request) or from its first byte (the next ones)")
    body_timeout_s: float = Field(default=10.0, gt=0, le=300, description="a request's body, from its headers")


class IIConfig(BaseModel):
    """The II's HTTPS listener, what it advertises, discovery, timers and policy."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535, description="0: any free port (tests)")
    base_path: str = Field(default="", description="II base URL path: '' or '/a/b' (the same on every node)")
    public_host: str | None = Field(default=None, description="AMQPS host in endpoints (default: the node name)")
    public_port: int | None = Field(default=None, ge=1, le=65535, description="AMQPS port in endpoints "
                                                                             "(default: the broker's)")
    discovery: DiscoveryConfig | None = Field(default=None, description="None: no DNS, stored neighbours only")
    poll_interval_s: float = Field(default=MAX_POLL_INTERVAL_S, gt=0, le=MAX_POLL_INTERVAL_S)
    capability_repost_s: float = Field(default=MAX_CAPABILITY_REPOST_S, gt=0, le=MAX_CAPABILITY_REPOST_S)
    first_poll_s: float = Field(default=0.05, gt=0, le=MAX_POLL_INTERVAL_S,
                                description="first poll of a REQUESTED subscription, doubling up to the interval")
    created_in_answer: bool = Field(default=True, description="answer POST /subscriptions with CREATED and the "
                                    "endpoints at once; False: answer REQUESTED (as the appendix D example) and "
                                    "let the subscriber poll")
    neighbour_grace_s: float = Field(
        default=3600.0, ge=0, le=MAX_NEIGHBOUR_GRACE_S,
        description="how long a neighbour that left DNS (IP_126 refuses it at once) keeps its subscriptions here "
                    "(their broker sources) before they are deleted; 0: at once. A neighbour found again within "
                    "it keeps them")
    request_timeout_s: float = Field(default=10.0, gt=0, le=120)
    retry_min_s: float = Field(default=0.5, gt=0, le=60, description="first retry after a failed request")
    retry_max_s: float = Field(default=60.0, gt=0, le=3600)
    federation_backoff_s: float = Field(default=0.5, gt=0, le=60, description="first reconnect of a data link")
    federation_idle_timeout_s: float = Field(default=30.0, ge=2, le=600, description="AMQP idle time-out of the "
                                             "data links: a neighbour silent for this long is dropped and the "
                                             "link built again")
    limits: RequestLimits = Field(default_factory=RequestLimits)
    policy: SubscriptionPolicy = Field(default_factory=SubscriptionPolicy)
    actors: ActorPolicy | None = Field(default=None, description="what each local actor may publish and subscribe "
                                       "to (IP_068 bilateral agreement); None: everything, logged at start-up")
    multihop: MultihopConfig = Field(default_factory=MultihopConfig)

    @field_validator("base_path")
    @classmethod
    def _base_path(cls, value: str) -> str:
        value = value.strip()
        if value in ("", "/"):
            return ""
        if not value.startswith("/") or value.endswith("/") or "//" in value or any(c in value for c in "?#{} "):
            raise ValueError("base_path must be '' or like '/a/b' (leading slash, no trailing slash)")
        return value
