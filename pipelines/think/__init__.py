"""The Librarian's think loop (seed 004): one stateless step (plan → evaluate → decide) returning
SEARCH / COMPLETE / ERROR, and the whole loop run against our own hybrid search as a job."""
