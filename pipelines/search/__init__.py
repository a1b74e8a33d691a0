"""Hybrid label search: Japanese-aware tokenizer and glossary, the lexical (BM25) postings, the
in-memory index with its snapshots, and the search service fusing them with dense similarity."""
