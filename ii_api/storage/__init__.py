"""The II's state on disk: SQLite in the data directory, one repository per table, run in one
store thread (:mod:`.store`)."""
