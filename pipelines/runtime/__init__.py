"""The job runtime: the job store (records, progress, leases), signed webhooks and SSRF-safe HTTP.
tasks/ and workers/ sit on it; the feature packages know nothing of it but the JobHandle they are given."""
