from .controller import ProfileController, provide_profiles
from .factory import open_profiles
from .model import WARNING_HEADER, AssistantProfile, client_instructions
from .service import Profiles

__all__ = [
    "WARNING_HEADER",
    "AssistantProfile",
    "ProfileController",
    "Profiles",
    "client_instructions",
    "open_profiles",
    "provide_profiles",
]
