"""What a selector says about capabilities, on plain values (no wire models): overlap of a
selector with a capability's property domains and the fit of a message (:mod:`.matching`), the
ILLEGAL policy on a selector's syntax tree (:mod:`.policy`). The lowest II package: the wire
models compute a capability's domains with it."""
