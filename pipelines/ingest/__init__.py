"""Label-image ingest: accept (validate and stage at submit), sources (file/URL fetch), images (safe
decode, storage), and the per-item pipeline (hash, identity check, text, chunks, embeddings, upsert)."""
