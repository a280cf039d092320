"""The OpenAI-compatible chat API: wire types, follow-up handling, streaming, OpenAI error bodies."""
