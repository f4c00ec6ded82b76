"""A TLEX streaming service written from the TLEX-BROKER-SYSTEM and UDAP TLC interface specs, for
the tests only: it imports nothing of the project (asn1tools encodes its payloads, aiohttp serves
its REST API, the standard library its TCPStreaming). See ``service.py``."""
