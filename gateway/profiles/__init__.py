"""Assistant profiles per tenant: who answers (name, persona, instructions, answer language), on which
routes and models; stored in the curation store's database, cached in-process, keyed into answers."""
