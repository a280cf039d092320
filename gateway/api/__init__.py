"""HTTP controllers: thin, they translate wire types and call services."""
