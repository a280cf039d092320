"""Local stand-ins for upstream services, so adapters are tested through their real clients."""
