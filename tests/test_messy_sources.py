"""A data owner's first hour with messy real-world files: a city's salary table (money columns with
"Not Provided" among the numbers, names with accents), a census extract (codes, weights, text with
spaces around it, as UCI's ``adult.data``), a survey export (a byte-order mark, CRLF line ends,
punctuation in the column names). Each test is one find of running ``schema draft``, ``connect``,
``query`` and ``synthesize`` on such files, with an exact oracle.
"""

from __future__ import annotations

import pandas as pd

from dpsql.owner.draft import draft_schema


def body(text: str) -> list[str]:
    """The lines of a drafted schema after its header and ``table:``, ``privacy_unit:``, ``columns:``."""
    return text.split("\n\n", 1)[1].splitlines()[3:]


def test_a_data_frame_is_drafted():
    """``draft_schema(frame)``, documented, stopped on a TypeError: the header named the source by
    ``os.fspath(frame)``."""
    frame = pd.DataFrame({"age": [30, 41, 52], "sex": ["F", "M", "F"]})
    text = draft_schema(frame, "people")
    assert "drafted by `dpsql schema draft` from a data frame." in text
    assert body(text) == ["  age: {type: integer, min: 30, max: 52}", "  sex: {type: categorical, values: [F, M]}"]
