"""Assistant profiles per tenant: who answers (name, persona, instructions, answer language), on which
routes and models; stored in the curation store's database, cached in-process, keyed into answers.

What other packages may use of it is named below; the rest is its own.
"""

from __future__ import annotations

from gateway.profiles.controller import ProfileController, provide_profiles
from gateway.profiles.factory import open_profiles
from gateway.profiles.model import WARNING_HEADER, AssistantProfile, client_instructions
from gateway.profiles.service import Profiles

__all__ = [
    "WARNING_HEADER",
    "AssistantProfile",
    "ProfileController",
    "Profiles",
    "client_instructions",
    "open_profiles",
    "provide_profiles",
]
