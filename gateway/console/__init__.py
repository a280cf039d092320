"""The web console: sign-in, the playground, the knowledge base and the review page, server-rendered."""
