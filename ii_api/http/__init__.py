"""The HTTPS surface of the II and the local actor API: routes and handlers (:mod:`.server`), the
OpenAPI document made from the route table (:mod:`.openapi`), the TLS listener (:mod:`.tls_site`).
The handlers call the operations named in :mod:`.doors` (``IIOperations``)."""
