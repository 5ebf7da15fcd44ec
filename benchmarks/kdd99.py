"""KDD Cup 1999 (the 10% sample, 494,021 rows) as an integer-coded CSV and domain file.

``../shared/data/kdd99/kdd99.tar.bz2`` (``DPSQL_DATA`` names another folder for
``../shared/data``, as for the other benchmarks) holds the raw records (``kdd99.data``) and their
schema (``kdd99.schema``: each column's categories, or ``continuous``). The synthetic-data
benchmark wants what ADULT and NLTCS are: every attribute coded ``0..k−1`` with a declared
domain size. So the categorical columns get the position of their value in the schema's
list, and the continuous ones are cut into bins by rules fixed in advance, from the
features' published definitions and never from the data:

* rates (the schema marks them ``(pct)``, values in [0, 1]): 11 bins, ``round(10·x)``;
* counts and sizes: powers of two, ``⌊log2(x + 1)⌋``, capped at :data:`LOG2_BINS` − 1 (byte
  counts 32 bins; ``count`` and ``srv_count`` count connections in a 2-second window, at
  most 511: 10 bins; the ``dst_host`` counts at most 255: 9 bins; duration 16 bins, the last
  one every connection of 9 hours or more; every other count 8 bins).

That makes 42 attributes (the 41 features and the attack label) and a domain of
3·10^40 cells: the high-dimensional case. The files are written once, atomically, to
``benchmarks/.data_cache/kdd99/`` (git-ignored), and reused.

    python benchmarks/kdd99.py        # prepare the files and print each attribute's domain size
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tarfile
import tempfile

import duckdb

ARCHIVE = os.path.join(os.environ.get("DPSQL_DATA") or
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"),
                       "kdd99", "kdd99.tar.bz2")
FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".data_cache", "kdd99")
#: Power-of-two bins of each count column (``⌊log2(x + 1)⌋`` capped at the last); other counts 8.
LOG2_BINS = {"src_bytes": 32, "dst_bytes": 32, "duration": 16, "count": 10, "srv_count": 10,
             "dst_host_count": 9, "dst_host_srv_count": 9}
RATE_BINS = 11


def available() -> bool:
    """Whether the shared archive is on this machine."""
    return os.path.exists(ARCHIVE)


def _columns(schema_text: str) -> list[tuple[str, list[str] | None, bool]]:
    """Each schema line as (name, categories or None when continuous, whether it is a rate)."""
    columns = []
    for line in schema_text.splitlines():
        if not line.strip():
            continue
        head, _, body = line.rstrip(".").partition(":")
        name = re.sub(r"\s*\(.*\)", "", head).strip()
        body = body.strip()
        columns.append((name, None if body == "continuous" else body.split(","), "(pct)" in head))
    return columns


def _code(position: int, name: str, categories: list[str] | None, rate: bool) -> tuple[str, int]:
    """The SQL that codes raw column ``position`` as ``0..k−1``, and ``k``."""
    raw = f"column{position:02d}"
    if categories is not None:  # the label carries a trailing full stop in the raw file
        literal = "[" + ", ".join("'" + c.replace("'", "''") + "'" for c in categories) + "]"
        return f"list_position({literal}, rtrim(CAST({raw} AS VARCHAR), '.')) - 1", len(categories)
    if rate:
        return f"CAST(round({raw} * {RATE_BINS - 1}) AS INTEGER)", RATE_BINS
    bins = LOG2_BINS.get(name, 8)
    return f"least(CAST(floor(log2({raw} + 1)) AS INTEGER), {bins - 1})", bins


def prepare() -> tuple[str, str]:
    """The paths of ``kdd99.csv`` and ``kdd99-domain.json``, written from the archive if absent."""
    csv, domain_file = os.path.join(FOLDER, "kdd99.csv"), os.path.join(FOLDER, "kdd99-domain.json")
    if os.path.exists(csv) and os.path.exists(domain_file):
        return csv, domain_file
    os.makedirs(FOLDER, exist_ok=True)
    work = tempfile.mkdtemp(dir=FOLDER)
    try:
        with tarfile.open(ARCHIVE) as tar:
            for member in ("kdd99/kdd99.data", "kdd99/kdd99.schema"):
                tar.extract(member, work, filter="data")
        with open(os.path.join(work, "kdd99", "kdd99.schema"), encoding="utf-8") as fh:
            columns = _columns(fh.read())
        coded = [_code(i, *c) for i, c in enumerate(columns)]
        con = duckdb.connect()
        con.execute("CREATE TABLE raw AS SELECT * FROM read_csv(?, header=false)",
                    [os.path.join(work, "kdd99", "kdd99.data")])
        select = ", ".join(f'{sql} AS "{name}"' for (sql, _), (name, _, _) in zip(coded, columns))
        con.execute(f"CREATE TABLE coded AS SELECT {select} FROM raw")
        for (_, size), (name, _, _) in zip(coded, columns):
            low, high, missing = con.execute(f'SELECT min("{name}"), max("{name}"), count(*) - count("{name}") '
                                             "FROM coded").fetchone()
            if missing or low < 0 or high >= size:
                raise ValueError(f"kdd99: column {name!r} has values outside its {size} codes")
        con.execute(f"COPY coded TO '{os.path.join(work, 'kdd99.csv')}' (HEADER)")
        with open(os.path.join(work, "kdd99-domain.json"), "w", encoding="utf-8") as fh:
            json.dump({name: size for (_, size), (name, _, _) in zip(coded, columns)}, fh, indent=1)
        os.replace(os.path.join(work, "kdd99-domain.json"), domain_file)
        os.replace(os.path.join(work, "kdd99.csv"), csv)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return csv, domain_file


if __name__ == "__main__":
    if not available():
        print(f"skipped: {ARCHIVE} is absent (the shared data sets are not on this machine)")
        sys.exit(0)
    with open(prepare()[1], encoding="utf-8") as fh:
        sizes = json.load(fh)
    print(f"{len(sizes)} attributes, {math.prod(sizes.values()):.2e} cells: {sizes}")
