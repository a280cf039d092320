"""Alembic migrations of the curation store (``alembic`` runs them: see :mod:`gateway.curation.store`)."""
