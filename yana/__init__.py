"""yana: shared core (settings, errors, ids, client factories, logging) and the CLI."""

__version__ = "1.0.0"
# The persona/output policy version the seed asks every success body to carry.
POLICY_VERSION = "say-2025-09-23"
NAME = "yana"
# The header a yana server (API, Flower) answers its health check with, carrying YANA_INSTANCE:
# `yana up` gives its children one token and counts a check healthy only with it, so another
# instance's server on the same port (two started at once) is never taken for its own.
INSTANCE_HEADER = "X-Yana-Instance"
