"""The other interchanges: found in DNS SRV (:mod:`.discovery`), called over HTTPS
(:mod:`.client`), their data pulled over AMQP links (:mod:`.federation`). What these are given
is named in :mod:`.doors`."""
