"""Vector store adapters: embedded LanceDB by default, Pinecone when a key is set."""
