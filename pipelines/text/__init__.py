"""Plain-text helpers shared by features: chunking and blank-text checks."""
