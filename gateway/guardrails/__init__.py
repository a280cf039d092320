"""Guardrails in front of every upstream call: personal data masked (or refused), injected instructions flagged.

:mod:`.pii` finds personal data (e-mail, phone, card, My Number, IP, names where a model is configured),
:mod:`.vault` swaps it for typed placeholders and back, :mod:`.injection` spots instructions smuggled into a
prompt or a retrieved passage, and :mod:`.service` applies each tenant's policy to a request.

What other packages may use of it is named in ``__init__.pyi``; the rest is its own.
"""

import lazy_loader

# The stub declares (and types) the names; each module behind them is imported when one of its names is first
# used, so a light user of the package (the folder sync's client) never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
