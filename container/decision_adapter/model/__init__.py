"""The model layer: the one llama.cpp context, its tokenizer and the GGUF file. The only layer
that imports llama_cpp."""
