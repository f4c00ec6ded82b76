"""The II in a node: :class:`~.service.IIService` composes the resources' objects,
:class:`~.propagation.Propagation` carries what changed in one to the others, :mod:`.runtime`
starts and stops it with its HTTPS listener and store, :mod:`.cli` lists its state."""
