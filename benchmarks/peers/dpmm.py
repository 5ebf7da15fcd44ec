"""Run dpmm's AIM and MST synthetic-data generators as peers of dpsql's.

dpmm (PyPI) pins numpy 1.26 and pandas 2.1, which clash with our environment,
so it lives in a venv of its own at ``benchmarks/.peer_venvs/dpmm`` (created
on first use, git-ignored) and runs ``dpmm_synth.py`` in a subprocess. This
module imports pandas only, never dpmm. See ``dpmm_synth.py`` for how dpmm is
called, and why no privacy budget goes to preprocessing.

    from peers.dpmm import run_dpmm
    table, info = run_dpmm("mst", "adult.csv", "adult-domain.json", 1.0, 1 / n**2, seed=0)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().with_name("dpmm_synth.py")
VENV = SCRIPT.parent.parent / ".peer_venvs" / "dpmm"
#: dpmm 0.1.9 declares Requires-Python >=3.10,<3.12.
SUPPORTED_PYTHONS = ((3, 10), (3, 11))
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def _base_python() -> str:
    """An interpreter dpmm supports to build the venv from: ours if it fits, else python3.11/3.10 on PATH."""
    if sys.version_info[:2] in SUPPORTED_PYTHONS:
        return sys.executable
    for name in ("python3.11", "python3.10"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("dpmm needs Python 3.10 or 3.11; none found on PATH")


def python_for_dpmm() -> str:
    """Path to the python of dpmm's venv, creating it (once) with the newest dpmm from PyPI.

    The venv counts as ready only once the install has finished (a marker file),
    so an interrupted install is redone from scratch; a file lock keeps two
    processes from building it at the same time.
    """
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / ".dpmm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.exists() and python.exists()):
            print(f"[peers.dpmm] creating {VENV} and installing dpmm from PyPI ...",
                  file=sys.stderr, flush=True)
            subprocess.run([_base_python(), "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "dpmm"], check=True)
            version = subprocess.run(
                [str(python), "-c", "from importlib.metadata import version; print(version('dpmm'))"],
                check=True, capture_output=True, text=True).stdout.strip()
            marker.write_text(version + "\n")
            print(f"[peers.dpmm] dpmm {version} installed", file=sys.stderr, flush=True)
    return str(python)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run_dpmm(
    method: str,
    csv: str | os.PathLike,
    domain_json: str | os.PathLike,
    epsilon: float,
    delta: float,
    seed: int,
    workload: Sequence[Sequence[str]] | str | os.PathLike | None = None,
    timeout: float | None = None,
    *,
    max_model_size: float | None = None,
    cores: int = 1,
    log: str | os.PathLike | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Fit dpmm's ``method`` ("aim" or "mst") to ``csv`` at (epsilon, delta) and sample a synthetic table.

    ``csv`` holds integer-coded columns, ``domain_json`` maps each column to
    its number of values (public, so dpmm spends no budget on it).
    ``workload`` (cliques of column names, or a JSON file of them) steers AIM;
    MST ignores it. ``max_model_size`` (MB) overrides AIM's 80. ``cores``
    caps BLAS threads and dpmm's worker processes (1 by default, so that a
    benchmark's timings are single-core). The subprocess's stderr (progress,
    one line per AIM round) goes to ``log`` if given.

    Returns the synthetic table (same columns, integer codes) and the script's
    JSON info: method, seconds (fit + sample), rows, dpmm_version, settings.
    Raises RuntimeError with the stderr tail if the run fails, TimeoutError
    (also with the tail) after ``timeout`` seconds.
    """
    python = python_for_dpmm()
    env = dict(os.environ, **{var: str(cores) for var in THREAD_VARS})
    with tempfile.TemporaryDirectory(prefix="dpmm_") as tmp:
        tmpdir = Path(tmp)
        out, err = tmpdir / "synth.csv", Path(log) if log else tmpdir / "stderr.txt"
        cmd = [python, str(SCRIPT), "--csv", str(Path(csv).resolve()),
               "--domain", str(Path(domain_json).resolve()), "--method", method,
               "--epsilon", repr(float(epsilon)), "--delta", repr(float(delta)),
               "--seed", str(int(seed)), "--out", str(out), "--n-jobs", str(cores)]
        if workload is not None:
            if isinstance(workload, (str, os.PathLike)):
                path = Path(workload).resolve()
            else:
                path = tmpdir / "workload.json"
                path.write_text(json.dumps([list(clique) for clique in workload]))
            cmd += ["--workload", str(path)]
        if max_model_size is not None:
            cmd += ["--max-model-size", repr(float(max_model_size))]

        with open(err, "w") as err_file:
            # A session of its own, so a timeout can end the script and any workers it started.
            proc = subprocess.Popen(cmd, cwd=tmpdir, env=env, stdout=subprocess.PIPE,
                                    stderr=err_file, text=True, start_new_session=True)
            try:
                stdout, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise TimeoutError(f"dpmm {method} did not finish in {timeout} s; stderr tail:\n"
                                   f"{_tail(err)}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"dpmm {method} failed (exit {proc.returncode}); stderr tail:\n{_tail(err)}")
        info = json.loads(stdout.strip().splitlines()[-1])
        table = pd.read_csv(out)
    return table, info
