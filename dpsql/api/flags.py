"""Messages in the command line's words: the advice a dpsql error gives in Python (``epsilon=...``,
``budget=None``, ``std_error``) rewritten as the flags that do the same (``--epsilon ...``, leaving
out ``--budget-epsilon``, ``--std-error``).

One public function, :func:`in_flags`, which ``dpsql`` applies to every error it prints. The
library's messages keep their Python spelling, right for :func:`dpsql.connect` and its methods;
only their advice is rewritten here, one table for all of it, and values a message reports (the
budget ``epsilon=1.0, delta=0.0 (pure DP)``) are left as they are.

>>> in_flags("say how much to spend: epsilon=... (the budget is epsilon=1.0, delta=0.0 (pure DP))")
'say how much to spend: --epsilon ... (the budget is epsilon=1.0, delta=0.0 (pure DP))'
>>> in_flags("std_error with Gaussian noise under an (epsilon, delta) budget needs delta=")
'--std-error with Gaussian noise under an (epsilon, delta) budget needs --delta'
>>> in_flags("name the file's columns in order: dpsql.CSV(path, names=[...])")
"name the file's columns in order: --names col1,col2,..."
"""

from __future__ import annotations

import re

__all__ = ["in_flags"]

_BUDGET_FLAGS = "--budget-epsilon (and --budget-delta) or --budget-rho"

#: (pattern, replacement) in the order applied: the whole phrases first, then the names in them.
_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), r) for p, r in (
    # dpsql.private.ledger: a ledger file without a ledger in it, and a budget that differs from the stored one
    (r"a new ledger needs a budget\b.*$", f"a new ledger needs its total budget: give {_BUDGET_FLAGS}"),
    (r"\(open it with budget=None to use the stored one\)",
     "(leave out --budget-epsilon, --budget-delta and --budget-rho to use the stored one)"),
    # dpsql.engine.engine: planning by accuracy
    (r"^std_error\b", "--std-error"),
    (r"\bgive std_error, or epsilon or rho,", "give --std-error, or --epsilon or --rho,"),
    (r"\bgive std_error, or the statements'", "give --std-error, or the statements'"),
    (r"\bneeds delta=(?=$|[\s),;])", "needs --delta"),
    # dpsql.private.budget: what to spend
    (r"^(epsilon|delta|rho)=(\S+?)(?= )", r"--\1 \2"),  # the amount asked for, which the message opens with
    (r"\bleave delta out\b", "leave out --delta"),
    (r", not rho\b", ", not --rho"),
    (r"\bwithout delta\b", "without --delta"),
    # dpsql.synth: AIM's budget
    (r"\bgive rho on a zCDP budget, or epsilon with a delta > 0 \(method='pgm'",
     "give --rho on a zCDP budget, or --epsilon with a --delta > 0 (--method pgm"),
    # dpsql.private.backend and dpsql.owner.validate: how to read a delimited text file
    (r"\bdpsql\.CSV\(path, names=\[\.\.\.\]\)", "--names col1,col2,..."),
    (r"\bdpsql\.CSV\(path, trim=True\)", "--trim"),
    (r"\bdpsql\.CSV\(path\) for a delimited text file of another name",
     "--names (a file without a header line) or --trim for a comma-separated file of another name"),
    # dpsql.synth: the row count to give, another method, and the owner's report (dpsql.owner.validate)
    (r"\bpass rows= or a larger max_seconds\b", "give --rows, or a larger --option max_seconds,"),
    (r"\bpass rows=", "give --rows"),
    (r"\bmethod='(\w+)'", r"--method \1"),
    (r"\bgive replays= to choose\b", "give --option replays=N to choose"),
    (r"\bthe connection's \.validation has the report\b", "dpsql validate gives the report"),
    # any other argument to give: name=... is --name ...
    (r"\b([a-z]+(?:_[a-z]+)*)=\.\.\.", "--{0} ..."),
))


def in_flags(message: str) -> str:
    """``message`` with its Python advice in flags (see the module docstring)."""
    for pattern, replacement in _REWRITES:
        if "{0}" in replacement:
            message = pattern.sub(lambda m, r=replacement: r.format(m.group(1).replace("_", "-")), message)
        else:
            message = pattern.sub(replacement, message)
    return message
