"""The worker of tests/test_accounts.py's concurrency test, in a module of its own so that a spawned
process imports the ledger alone, not everything the test module imports."""

from dpsql.errors import BudgetExceededError
from dpsql.private.budget import Budget, Cost
from dpsql.private.ledger import Ledger


def spend(path: str, analyst: str, part: "Budget | None", cost: Cost, attempts: int, start, results) -> None:
    """Open the ledger at ``path``, wait for ``start``, try to spend ``cost`` ``attempts`` times as
    ``analyst`` with ``part``, and put ``(analyst, ids of the recorded spends, refusal messages)`` on ``results``."""
    ledger = Ledger(path)
    account = ledger.account(analyst, part)
    start.wait()
    ids, refused = [], []
    for i in range(attempts):
        try:
            ids.append(account.spend(cost, description=f"{analyst} {i}", mechanism="laplace"))
        except BudgetExceededError as e:
            refused.append(str(e))
    ledger.close()
    results.put((analyst, ids, refused))
