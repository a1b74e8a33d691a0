"""One field read off one line's crop: what the near-duplicate decision reads across.

A field read off one photograph and not off the other is how a product line's labels (one design,
another grade or number) hide: OCR misses small print on one side, and the pixels alone merge
them. The decision (pipelines.neardup.printed, `compare(..., across=...)`) maps the field's line
onto the other photograph and asks this module what that crop says there, as a value of the same
field, formatted as the decision compares read values (pipelines.ingest.readings.identity_fields:
the value, then the values its digits may also be after MAYBE_SEP).
"""

from __future__ import annotations

import numpy as np

from pipelines.neardup.decision import MAYBE_SEP
from pipelines.neardup.printed import NUMBERS
from pipelines.read.fields import bare_value, extract_fields, plausible
from pipelines.read.ocr import Reading, get_reader


def read_field_at(crop: np.ndarray, vertical: bool, key: str, engine: str | None = None) -> str:
    """The value of field `key` that the line in `crop` prints ('' when it reads none that a label
    can print: `fields.plausible`). Engines without single-line recognition read nothing."""
    reader = get_reader(engine)
    recognise = getattr(reader, "recognise_line", None)
    if recognise is None:
        return ""
    line = recognise(crop, vertical)
    if line is None:
        return ""
    found = extract_fields(Reading((line,), reader.name))
    f = found.fields.get(key)
    if f is None or f.source != "ocr":
        # a crop that reads as another printed number's line is not this field's (misplaced)
        if any(k in found.fields for k in NUMBERS if k != key):
            return ""
        # the line is known to be this field's: its number and unit alone say its value
        value = bare_value(key, line.text)
        return value if plausible(key, value) else ""
    if not plausible(key, f.value):
        return ""
    others = [v for v in found.maybe.get(key, ()) if v != f.value and plausible(key, v)]
    return MAYBE_SEP.join([f.value, *others])
