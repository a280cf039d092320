"""``python -m routes.offline.local_llm``: see :mod:`routes.offline.local_llm.cli`."""

from routes.offline.local_llm.cli import main

main()
