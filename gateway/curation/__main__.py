"""``python -m gateway.curation``: the store's commands (:mod:`gateway.curation.cli`)."""

from __future__ import annotations

import sys

from gateway.curation.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
