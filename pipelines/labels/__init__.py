"""The label: its schema (fields, metadata, label text) and its stored image."""
