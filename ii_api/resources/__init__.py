"""One object per resource of the II, each owning its state in memory and its rows in the store,
and reconciling the broker's addresses and the neighbours with it: neighbours and what they
announced (:mod:`.neighbours`), neighbours gone from DNS (:mod:`.departures`), neighbours'
subscriptions here (:mod:`.incoming`), ours at neighbours (:mod:`.outgoing`, with
:mod:`.imports`), actors' capabilities, deliveries and subscriptions (:mod:`.local_actors`),
capability pushes (:mod:`.pushes`), multi-hop re-export (:mod:`.reexport`), and the broker's
addresses (:mod:`.broker_addresses`). What each object is given (views of the others, the
data plane, and the events it reports) is named in :mod:`.doors`."""
