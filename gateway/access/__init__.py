"""Who may call the gateway and how much: API keys -> tenants and scopes, rate limits, token budgets."""
