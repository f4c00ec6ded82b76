"""The Basic Interface data plane: an AMQP 1.0 broker (chapter 3)."""
