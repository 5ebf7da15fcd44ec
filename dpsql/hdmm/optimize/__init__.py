"""HDMM strategy operators and the selector that keeps the best of them."""

from dpsql.hdmm.optimize.kron import opt_kron
from dpsql.hdmm.optimize.marginal import opt_marginal
from dpsql.hdmm.optimize.opt0 import opt_0
from dpsql.hdmm.optimize.selector import Selection, select
from dpsql.hdmm.optimize.union import opt_plus

__all__ = ["opt_0", "opt_kron", "opt_plus", "opt_marginal", "select", "Selection"]
