"""The engine: planning, spending and answering, once, below every front end.

:mod:`~dpsql.engine.dataset` opens an owner's private table (:class:`Dataset`) and
gives an :class:`Engine` per owner or analyst account; :mod:`~dpsql.engine.engine`
runs a :class:`Request` (SQL → workload → strategy → private measurement → answers);
:mod:`~dpsql.engine.spend` works out the noise options a spend allows;
:mod:`~dpsql.engine.uncertainty` gives every answer its standard error and interval;
:mod:`~dpsql.engine.answer` holds what goes back to the front ends. The Python API
(:mod:`dpsql.api`), the command line and the server (:mod:`dpsql.server`) only
translate their input into Requests and Answers into their output. :class:`Budget` and
:class:`Cost` are re-exported here, the currency every front end states spends in.
"""

from dpsql.engine.answer import Answer, Explanation, Release
from dpsql.engine.dataset import Dataset
from dpsql.engine.engine import Engine, Request, Strategies
from dpsql.private.budget import Budget, Cost

__all__ = ["Answer", "Budget", "Cost", "Dataset", "Engine", "Explanation", "Release", "Request", "Strategies"]
