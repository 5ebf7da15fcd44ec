"""HDMM strategy operators and the selector that keeps the best of them."""

from .kron import opt_kron
from .marginal import opt_marginal
from .opt0 import opt_0
from .selector import Selection, select
from .union import opt_plus

__all__ = ["opt_0", "opt_kron", "opt_plus", "opt_marginal", "select", "Selection"]
