from .guard import BEARER, SECURITY_SCHEMES, Access, open_access, provide_principal, provide_reader, require
from .identity import (
    MAX_GROUPS,
    MAX_USER_ID_CHARS,
    Identity,
    Reader,
    ReaderSource,
    for_openai_user,
    open_identity,
    user_group,
)
from .keys import OpenAccessError, Principal, check_exposure
from .sessions import (
    CONSOLE_PATH,
    ConsoleAccess,
    ConsoleCookies,
    SignInRequiredError,
    console_cookies,
    session_for_key,
    session_for_tenant,
)

__all__ = [
    "BEARER",
    "CONSOLE_PATH",
    "MAX_GROUPS",
    "MAX_USER_ID_CHARS",
    "SECURITY_SCHEMES",
    "Access",
    "ConsoleAccess",
    "ConsoleCookies",
    "Identity",
    "OpenAccessError",
    "Principal",
    "Reader",
    "ReaderSource",
    "SignInRequiredError",
    "check_exposure",
    "console_cookies",
    "for_openai_user",
    "open_access",
    "open_identity",
    "provide_principal",
    "provide_reader",
    "require",
    "session_for_key",
    "session_for_tenant",
    "user_group",
]
