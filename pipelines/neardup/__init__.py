"""Near-duplicate detection: content hashes, the pHash index with its atomic check-and-insert,
the aligned-image verifier and its compiled kernels, the decision, and the duplicates report."""
