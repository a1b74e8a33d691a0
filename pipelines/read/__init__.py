"""Reading labels: OCR (pipelines.read.ocr) and fields from the read text (pipelines.read.fields).

Framework-free: no Celery or FastAPI here; ingest, identity and search call these functions.
"""
