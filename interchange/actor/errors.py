"""The toolkit's one exception: what went wrong and what to do about it, as one line.

Every failure an actor can meet (settings, a refused request, a node out of reach, properties or
a selector the node would refuse) is an :class:`ActorError`; the command line prints it as is,
never a traceback. A broker's rejection of a published message is not an error but an outcome
(:class:`interchange.actor.amqp.PublishOutcome`).
"""
from __future__ import annotations

__all__ = ["ActorError"]


class ActorError(Exception):
    """``message``: what went wrong; ``hint``: what to do (optional); ``status``: the node's HTTP
    status when it answered; ``field``: the body field it named."""

    def __init__(self, message: str, hint: str | None = None, *, status: int | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.status = status
        self.field = field

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"
