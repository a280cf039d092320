"""``python -m gateway.ingest``: keep a tenant's knowledge in step with folders of files, through the HTTP API."""
