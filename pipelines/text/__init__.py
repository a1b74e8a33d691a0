"""Plain-text helpers shared by features: chunking, blank-text checks and edit distance."""
