"""The ``[ii]`` section of the node configuration (:mod:`.config`)."""
