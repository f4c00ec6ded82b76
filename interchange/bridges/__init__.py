"""Bridges between the interchange and other C-ITS transports (TLEX/UDAP traffic-light streaming, ...)."""
