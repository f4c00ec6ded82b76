import sys

from interchange.app.cli import main

sys.exit(main())
