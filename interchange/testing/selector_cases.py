"""Selectors the actor toolkit's tests use both offline (tests/unit/test_actor_library.py: the
toolkit's checks against the node's parser and the II's matching) and against a running federation
(tests/integration/test_actor_federation.py: the node answers as the toolkit said)."""
from __future__ import annotations

#: Selectors the Java JMS engines (ActiveMQ, Artemis, Broker-J) refuse, and so does the node.
REFUSED_BY_THE_JAVA_ENGINES = ["causeCode IN (1, 2)", "causeCode = NULL", "causeCode < 'x'", "a = 5f", "a = 0x2AL",
                               "TRUE = 1", "xpath = 'x'", "messageType = 'DENM' AND", "quadTree LIKE 5",
                               "a = 1 -- no line break\n AND"]

#: Valid selectors over the C-Roads properties, matching some of the demo's capabilities and not others.
SELECTORS = ["messageType = 'DENM'", "messageType = 'IVIM' AND quadTree LIKE '%,1202021%'",
             "messageType = 'DENM' AND causeCode = 94", "causeCode = 2 AND messageType = 'DENM'",
             "quadTree LIKE '%,0313%'", "quadTree LIKE '%,03%' AND NOT quadTree LIKE '%,0313322%'",
             "publisherId = 'NL00001' OR messageType = 'CAM'", "protocolVersion LIKE 'IVIM:%'",
             "originatingCountry IN ('NO', 'SE')", "messageType = 'DENM' AND (causeCode = 1 OR causeCode = 3)", ""]
