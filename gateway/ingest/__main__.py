"""``python -m gateway.ingest``: see :mod:`gateway.ingest.cli`."""

import sys

from gateway.ingest.cli import main

sys.exit(main())
