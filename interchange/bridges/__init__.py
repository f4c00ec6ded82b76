"""Bridges between the interchange and other C-ITS transports (TLEX/UDAP traffic-light streaming,
InterCor IF2 on RabbitMQ, ...), each a package of its own."""
