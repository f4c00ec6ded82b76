import sys

from interchange.cli import main

sys.exit(main())
