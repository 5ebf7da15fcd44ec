"""Test-session settings.

The suite runs one pytest-xdist worker per core (``-n logical``); a BLAS pool of one
thread per core in every worker would oversubscribe the cores, and OpenBLAS's spinning
threads then slow dense algebra many times over (a 276 × 276 SVD took 1.3 s instead of
0.03 s with both cores busy). Each test process therefore keeps its BLAS to one thread.
Set here, before any test module imports numpy, and inherited by the workers.
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
