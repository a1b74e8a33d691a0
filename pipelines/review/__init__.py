"""A person's review of near-duplicate merges: split a wrong merge, merge two labels that are one."""
