"""Re-embedding: build a collection for another model in the background, then swap the alias."""
