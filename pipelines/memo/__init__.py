"""Memo (seed 001): short-lived notes with TTL, searchable by meaning."""
