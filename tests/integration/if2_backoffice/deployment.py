"""An IF2 broker operator's set-up of one virtual host, as RabbitMQ definitions (IF2 6.1, 6.2, 7.2).

IF2 7.2 configures RabbitMQ by hand: a virtual host per environment (6.1), users with configure
rights on it (their queues are their own, 6.3), a policy that keeps queues from blocking the
broker (step 5: message-ttl and max-length, "set realistically" in production), and the four
durable, non auto-delete topic exchanges DENM, IVI, MAP and SPAT (6.2, Table 2). These
definitions say the same in the form ``rabbitmqctl import_definitions`` reads.

An operator who wants to see what its consumers refuse adds a dead-letter exchange to that policy
(``dead-letter-exchange``, applied to the server-named queues of Table 3) and a durable queue bound
to it: a message a consumer rejects without requeue lands there with an ``x-death`` header naming
its queue, exchange, routing key and the reason ``rejected``. ``dead_letters=False`` leaves that
out (the broken variant: a rejected message is dropped).
"""
from __future__ import annotations

from typing import Any

__all__ = ["DEAD_LETTER_EXCHANGE", "DEAD_LETTER_QUEUE", "EXCHANGES", "definitions"]

#: IF2 6.2: one topic exchange per message type.
EXCHANGES = ("DENM", "IVI", "MAP", "SPAT")
DEAD_LETTER_EXCHANGE = "if2.dead-letter"
DEAD_LETTER_QUEUE = "if2.dead-letters"
#: RabbitMQ names the queues it names itself (Table 3: "name empty") amq.gen-...
SERVER_NAMED = r"^amq\.gen-"


def definitions(vhost: str, users: list[str], *, dead_letters: bool = True, max_length: int = 50_000,
                message_ttl_ms: int = 600_000) -> dict[str, Any]:
    """One virtual host for ``users`` (every right on it), its limits policy and Table 2's exchanges;
    with ``dead_letters`` a dead-letter exchange in the policy, and its queue."""
    policy: dict[str, Any] = {"max-length": max_length, "message-ttl": message_ttl_ms}
    exchanges = [{"name": name, "vhost": vhost, "type": "topic", "durable": True, "auto_delete": False,
                  "internal": False, "arguments": {}} for name in EXCHANGES]
    queues: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    if dead_letters:
        policy["dead-letter-exchange"] = DEAD_LETTER_EXCHANGE
        exchanges.append({"name": DEAD_LETTER_EXCHANGE, "vhost": vhost, "type": "fanout", "durable": True,
                          "auto_delete": False, "internal": False, "arguments": {}})
        queues.append({"name": DEAD_LETTER_QUEUE, "vhost": vhost, "durable": True, "auto_delete": False,
                       "arguments": {}})
        bindings.append({"source": DEAD_LETTER_EXCHANGE, "vhost": vhost, "destination": DEAD_LETTER_QUEUE,
                         "destination_type": "queue", "routing_key": "", "arguments": {}})
    return {
        "vhosts": [{"name": vhost}],
        "permissions": [{"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
                        for user in users],
        "policies": [{"vhost": vhost, "name": "if2-queues", "pattern": SERVER_NAMED, "apply-to": "queues",
                      "definition": policy, "priority": 0}],
        "exchanges": exchanges, "queues": queues, "bindings": bindings,
    }
