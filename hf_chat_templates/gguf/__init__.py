"""GGUF files: the chat template and tokenizer metadata llama.cpp and Ollama read, checked against a tokenizer
folder and written into a new file with everything else byte for byte."""

from .reading import GgufFileError, GgufTokenizer, is_gguf, read_gguf

__all__ = ["GgufFileError", "GgufTokenizer", "is_gguf", "read_gguf"]
