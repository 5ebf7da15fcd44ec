"""Tools for the data owner only: they read the private data WITHOUT noise.

:mod:`~dpsql.owner.validate` reports how the table fits its schema (what the
measurement drops and why), :mod:`~dpsql.owner.evaluate` compares a synthetic table
with the exact private answers, and :mod:`~dpsql.owner.audit` audits every
mechanism's privacy statistically on neighbouring tables. Never hand their
output to an analyst.
"""
