"""yana: shared core (settings, errors, ids, client factories, logging) and the CLI."""

__version__ = "1.0.0"
# The persona/output policy version the seed asks every success body to carry.
POLICY_VERSION = "say-2025-09-23"
NAME = "yana"
