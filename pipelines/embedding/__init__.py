"""Embeddings: model backends (sentence-transformers, the int8 e5 ONNX build), the embedding cache,
and the model-versioned Chroma collections with their active alias."""
