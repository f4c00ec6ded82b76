"""PySpark pipeline for log replay and governance audits (to come); its input is the JSON-lines
log whose schema lives in :mod:`interchange.logformat`."""
