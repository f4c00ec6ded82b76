"""The InterCor IF2 bridge: IF2 back-offices (AMQP 0-9-1 topic exchanges on RabbitMQ) in and out
of the C-Roads interchange (see :mod:`.keys`, :mod:`.bindings`, :mod:`.republish`, :mod:`.bridge`).
Details: docs/if2-bridge.md."""
