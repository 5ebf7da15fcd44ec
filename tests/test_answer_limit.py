"""The answer limit (dpsql.limits.MAX_QUERIES) holds a tract-level release, and its refusal
estimates the memory asked for before anything is formed."""

from __future__ import annotations

import pytest

from dpsql import limits
from dpsql.errors import ResourceLimitError

#: 85,000 tracts x (sex x 6 age groups + total + 7 races x Hispanic): issue 41's batch at tract level
TRACT_BATCH = 85_000 * (2 * 6 + 1 + 7 * 2)


def test_a_tract_level_batch_fits():
    assert TRACT_BATCH == 2_295_000
    limits.check_queries(TRACT_BATCH, "this batch needs")
    limits.check_queries(85_000 * 126 + TRACT_BATCH, "this batch needs")  # and race (63) x Hispanic beside it


def test_the_refusal_estimates_the_memory():
    limits.check_queries(limits.MAX_QUERIES, "this batch needs")
    with pytest.raises(ResourceLimitError, match=r"needs 20,000,001 answers \(about 8\.0 GB of memory\), more than "
                                                 r"the limit of 20,000,000"):
        limits.check_queries(limits.MAX_QUERIES + 1, "this batch needs")
    assert limits.MAX_QUERIES * limits.BYTES_PER_ANSWER <= limits.MAX_ANSWER_BYTES
