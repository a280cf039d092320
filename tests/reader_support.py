"""Keys for tests where a chatbot backend asks for its users: an admin key that writes the documents, and a query key
trusted to name the user and their groups in headers (an ingress signed them in), as the identity layer reads them."""

from __future__ import annotations

from gateway.access.keys import hash_key
from gateway.settings import ApiKeyConfig

ADMIN_KEY = "admin-key"
CHATBOT_KEY = "chatbot-key"


def admin_and_chatbot_keys(tenant: str) -> list[ApiKeyConfig]:
    return [
        ApiKeyConfig(name="admin", key_sha256=hash_key(ADMIN_KEY), tenant=tenant, scopes=["admin"]),
        ApiKeyConfig(
            name="chatbot",
            key_sha256=hash_key(CHATBOT_KEY),
            tenant=tenant,
            scopes=["query"],
            acts_for_users=True,
            trusts_user_headers=True,
        ),
    ]
