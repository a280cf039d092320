"""The knowledge base: the documents API, chunking, embedding and search of each tenant's documents."""
