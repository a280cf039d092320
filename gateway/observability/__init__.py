"""Prometheus metrics, OpenTelemetry traces and JSON logs of the gateway (see README "Observability")."""
