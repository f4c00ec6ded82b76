"""An AMQP connection in memory for tests without sockets: a client engine and the broker's connection
engine handing each other their output until neither has anything more to say."""
from __future__ import annotations

from interchange.broker.client import ClientEngine
from interchange.broker.engine import ConnectionEngine


def pump(client: ClientEngine, server: ConnectionEngine, rounds: int = 50) -> None:
    """Move bytes both ways until both sides are quiet (at most ``rounds`` exchanges)."""
    for _ in range(rounds):
        out, back = client.take_output(), bytes(server.take_output())
        if not out and not back:
            return
        if out:
            server.receive(out)
        if back:
            client.receive(back)
