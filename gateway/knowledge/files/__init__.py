"""Files in: each supported format read into titled sections, which the knowledge base chunks and indexes."""
