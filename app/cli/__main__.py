"""`python -m app.cli`: the same command as `dra-webhook`."""

import sys

from app.cli import main

sys.exit(main())
