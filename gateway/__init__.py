"""Adaptive routing gateway: HTTP service, providers, caching and telemetry."""
