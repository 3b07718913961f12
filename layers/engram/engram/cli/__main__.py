"""`python -m engram.cli`: the `engram` command."""

import sys

from engram.cli.main import main

sys.exit(main())
