"""How many BLAS threads a strategy selection's dense steps use: the machine's cores, shared.

Dense linear algebra (Gram products, eigendecompositions, the error analysis of a candidate)
runs in the BLAS library's threads. Left at its default, every process starts one thread per
core; with other selections or other work on the same cores, the threads outnumber the cores and
each dense step crawls (a sample variance took 61-69 s with two BLAS threads per process on two
busy cores, 4.4 s with one). So each selection takes its share of the cores that are free:

    threads = max(1, floor((cores - other load) / selections running in this process))

where ``cores`` are those this process may run on, and ``other load`` is the machine's one-minute
load average less this process's own selections (at least 0). A quiet machine gives one
selection every core; a busy one, or several selections at once, one thread each: never more
threads than cores.

>>> thread_count(cores=2, load=0.0, active=1), thread_count(cores=2, load=9.0, active=1)
(2, 1)
>>> thread_count(cores=8, load=1.0, active=3), thread_count(cores=8, load=0.0, active=20)
(2, 1)
"""

from __future__ import annotations

import functools
import math
import os
import threading
from contextlib import contextmanager
from typing import Iterator

from threadpoolctl import ThreadpoolController

__all__ = ["cores", "thread_count", "dense_threads", "blas_threads"]

_lock = threading.Lock()
_active = 0


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def thread_count(cores: int, load: float, active: int) -> int:
    """BLAS threads for one of ``active`` selections in this process, on ``cores`` cores whose
    one-minute load average is ``load`` (see the module docstring)."""
    other = max(0.0, load - active)
    return max(1, min(cores, math.floor((cores - other) / max(1, active))))


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average: assume a quiet machine
        return 0.0


@functools.cache
def _controller() -> ThreadpoolController:
    """The thread pools of the libraries loaded in this process, found once. ``threadpool_limits``
    finds them anew on every call by reading every loaded library: 24 ms a call on a busy
    machine, and one selection set a limit 77 times (1.9 s of a county-level request)."""
    return ThreadpoolController()


@contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Run the body with the BLAS libraries limited to ``n`` threads."""
    with _controller().limit(limits=n, user_api="blas"):
        yield


@contextmanager
def dense_threads() -> Iterator[int]:
    """Run the body with BLAS limited to this selection's share of the cores; yields that count.
    The limit is process-wide (BLAS has no per-thread setting), so selections running at once in
    one process each set the share counting all of them."""
    global _active
    with _lock:
        _active += 1
        n = thread_count(cores(), _load(), _active)
    try:
        with blas_threads(n):
            yield n
    finally:
        with _lock:
            _active -= 1
