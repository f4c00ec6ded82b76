"""Sans-I/O decisions on the wire models: values in, decisions or actions out, no socket, disk or
clock. Incoming grants, RESUBSCRIBE checks, what to request from whom and the outgoing state
machine (:mod:`.subscriptions`), multi-hop announcements and routes (:mod:`.multihop`),
make-before-break (:mod:`.handover`), actors' agreements (:mod:`.actor_policy`), selectors built
from capabilities (:mod:`.capability_selector`), and how the heavy ones run in slices on the
event loop (:mod:`.slices`)."""
