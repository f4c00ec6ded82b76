"""Improved Interface (II, chapter 4 of the C-Roads IP Based Interface Profile): the HTTPS
control plane of the interchange, and the local actor API built on the same JSON.

Modules include :mod:`ii_api.models` (pydantic models of every JSON body, Tables 9-15, appendices C
and D, and the local actor API), :mod:`ii_api.errors` (refused operations, HTTP 400 bodies
from validation errors), :mod:`ii_api.matching` (selector/capability overlap for IP_133/134 and NO_OVERLAP,
message/capability fit for deliveries), :mod:`ii_api.discovery` (DNS SRV discovery),
:mod:`ii_api.store` (persistent state) and :mod:`ii_api.federation` (data links to neighbours).
"""
