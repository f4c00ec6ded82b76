"""The PySpark audit pipeline over the node's JSON-lines logs: ``interchange audit <job>``.

- :mod:`spark.tables` — the output tables (schemas, paths); :mod:`spark.session` — the SparkSession.
- :mod:`spark.parse` — log lines (interchange.ground.logformat v1/v2) to typed rows, in column expressions.
- :mod:`spark.ingest` — logs to Parquet; :mod:`spark.validate` and :mod:`spark.rules` — the rule
  engine; :mod:`spark.stream` — the same per-record rules over the rotated log directory.
- :mod:`spark.cli` — the command line (imports no pyspark: the node runs without the ``[spark]`` extra).

pyspark is an optional extra (``pip install '.[spark]'``); only :mod:`spark.cli` and
:mod:`spark.loggen` may be imported without it.
"""
