"""An IF2 back-office and its broker operator, written for the tests from the InterCor IF2 hybrid
specification (chapters 6 and 7), sharing no code with this project.

It is the counterpart of the IF2 bridge: what a member state's traffic-management back-office
and the operator of its RabbitMQ do. It imports the standard library and pika only (not pamqp,
the bridge's codec; ``tests/integration/test_if2_backoffice.py`` checks its imports). From where:

- :mod:`if2_backoffice.tiles`: 6.4's routing key and the zoom-18 quadtree path (7.3.4);
- :mod:`if2_backoffice.office`: publishing (7.3.2: ``lat``/``lon`` headers, ``expiration``) and
  consuming (7.3.3, Table 3's queues) over TLS with SASL EXTERNAL, and reading dead letters;
- :mod:`if2_backoffice.deployment`: the virtual host, its queue policy, Table 2's exchanges (7.2)
  and a dead-letter exchange, as RabbitMQ definitions.
"""
from if2_backoffice.office import BackOffice, Broker, ConnectBackOffice, Publication, Received
from if2_backoffice.deployment import DEAD_LETTER_EXCHANGE, DEAD_LETTER_QUEUE, EXCHANGES, definitions
from if2_backoffice.tiles import ZOOM, quadtree_path, routing_key

__all__ = ["DEAD_LETTER_EXCHANGE", "DEAD_LETTER_QUEUE", "EXCHANGES", "ZOOM", "BackOffice", "Broker", "ConnectBackOffice",
           "Publication", "Received", "definitions", "quadtree_path", "routing_key"]
