"""The Redis layout of search: the only module that spells its keys.

yana:collection:active        string: the active label collection (the alias a re-embed swaps)
yana:collection:building      string: the collection a re-embed is filling (ingest writes there too)
yana:collection:building:job  string: the re-embed job that holds it
yana:lex:{collection}:*       the lexical postings, documents and change log of one collection
"""

ACTIVE_ALIAS_KEY = "yana:collection:active"
BUILDING_KEY = "yana:collection:building"
BUILDING_JOB_KEY = BUILDING_KEY + ":job"


def lexical_prefix(collection: str) -> str:
    return f"yana:lex:{collection}:"
