"""spark-submit entry point: ``spark-submit --master spark://... spark/submit.py <job> --input ... --output ...``.

The same jobs as ``interchange audit <job>``; spark-submit decides master and resources.
"""
from __future__ import annotations

import sys

from spark import cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
