"""Developer tools outside the service: synthetic label data and evaluation helpers, used by
`yana sample-labels`, bench/ and tests."""
