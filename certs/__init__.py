"""Session-level PKI (chapter 5, appendix E) and the node's single TLS-settings module.

- :mod:`certs.pki`: the PKI directory (root, intermediates, leaves, revocations, CRLs) and its layout;
- :mod:`certs.testpki`: :func:`create_test_pki`, a whole test PKI in one call;
- :mod:`certs.tls`: every TLS context of the node (asyncio/aiohttp ``ssl`` and proton);
- :mod:`certs.cli`: ``interchange pki ...``.
"""
from certs.errors import PeerIdentityError, PkiError
from certs.keys import KeySpec
from certs.pki import IssuedIdentity, Pki
from certs.testpki import TestPki, create_test_pki

__all__ = ["IssuedIdentity", "KeySpec", "PeerIdentityError", "Pki", "PkiError", "TestPki", "create_test_pki"]
