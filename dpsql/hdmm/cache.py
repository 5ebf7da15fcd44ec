"""An on-disk cache of selected strategies.

Strategy selection looks only at the workload and the noise family, never at
data, so its result can be reused freely: a repeated batch pays for the
optimization once. Entries are keyed by a SHA-256 of the workload's
fingerprint (see :meth:`dpsql.hdmm.workload.Workload.fingerprint`), the noise
family (``laplace`` or ``gaussian``: the strategy does not depend on ε or δ,
only on the norm that calibrates the noise), the selection settings and the
cache format version.

Each entry is one ``.npz`` file holding the strategy's arrays plus a JSON
description of its structure (no pickle, so a cache file cannot execute
code). Writes go to a temporary file in the same directory, are fsynced and
then atomically renamed over the target, so a reader sees either the old
entry, the new one, or none, never a torn file. A corrupt or unreadable
entry is treated as a miss.

>>> import tempfile
>>> from dpsql.privacy import Laplace
>>> from dpsql.hdmm.workload import marginals_workload
>>> cache = StrategyCache(tempfile.mkdtemp())
>>> W = marginals_workload((3, 4), k=1)
>>> key = cache.key(W, Laplace(1.0), restarts=1, seed=0)
>>> cache.get(key) is None
True
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.errors import CacheError, WorkloadError
from dpsql.hdmm.marginals import Marginals, ResidualMarginals
from dpsql.hdmm.matrix import DENSE_LIMIT, Dense, GramFactored, Identity, Matrix, Ones
from dpsql.hdmm.pidentity import PIdentity
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, Strategy, UnionStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

#: Bump when the stored format or the optimizers change in a way that should invalidate entries
#: (3: keys are on the reduced workload, and the identity and direct candidates joined; 4: the
#: Gaussian per-attribute strategy no longer loses its optimum on cells no query reads).
FORMAT_VERSION = 4


def default_directory() -> Path:
    """``$DPSQL_CACHE_DIR``, else ``$XDG_CACHE_HOME/dpsql/strategies``, else ``~/.cache/dpsql/strategies``."""
    if os.environ.get("DPSQL_CACHE_DIR"):
        return Path(os.environ["DPSQL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dpsql" / "strategies"


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, a: np.ndarray) -> str:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = np.asarray(a)
        return name

    def matrix(self, m: Matrix) -> dict[str, Any]:
        if isinstance(m, PIdentity):
            return {"type": "PIdentity", "theta": self.array(m.theta), "norm": m.norm}
        if isinstance(m, GramFactored):
            return {"type": "GramFactored", "array": self.array(m.array), "gram_inverse": self.array(m.gram_inverse)}
        if isinstance(m, Dense):
            return {"type": "Dense", "array": self.array(m.array)}
        if isinstance(m, Identity):
            return {"type": "Identity", "n": m.n}
        if isinstance(m, Ones):
            return {"type": "Ones", "shape": list(m.shape)}
        if isinstance(m, Marginals):
            return {"type": "Marginals", "domain": list(m.domain), "theta": self.array(m.theta)}
        if isinstance(m, ResidualMarginals):
            return {"type": "ResidualMarginals", "domain": list(m.domain), "weights": self.array(m.weights)}
        if m.shape[0] * m.shape[1] <= DENSE_LIMIT:  # a workload's own factor (the direct candidate)
            return {"type": "Dense", "array": self.array(m.dense())}
        raise CacheError(f"cannot cache a strategy factor of type {type(m).__name__}")

    def strategy(self, s: Strategy) -> dict[str, Any]:
        if isinstance(s, KronStrategy):
            return {"type": "KronStrategy", "operator": s.operator, "factors": [self.matrix(f) for f in s.factors]}
        if isinstance(s, UnionStrategy):
            return {
                "type": "UnionStrategy", "operator": s.operator, "weights": list(s.weights), "groups": s.groups,
                "parts": [self.strategy(p) for p in s.parts],
            }
        if isinstance(s, MarginalStrategy):
            fixed = None if s.fixed is None else [None if f is None else self.matrix(f) for f in s.fixed]
            return {"type": "MarginalStrategy", "operator": s.operator, "strategy": self.matrix(s.strategy),
                    "fixed": fixed}
        raise CacheError(f"cannot cache a strategy of type {type(s).__name__}")


def _decode_matrix(spec: dict[str, Any], arrays: dict[str, np.ndarray]) -> Matrix:
    t = spec["type"]
    if t == "PIdentity":
        return PIdentity(arrays[spec["theta"]], spec["norm"])
    if t == "GramFactored":
        return GramFactored(arrays[spec["array"]], arrays[spec["gram_inverse"]])
    if t == "Dense":
        return Dense(arrays[spec["array"]])
    if t == "Identity":
        return Identity(spec["n"])
    if t == "Ones":
        return Ones(*spec["shape"])
    if t == "Marginals":
        return Marginals(spec["domain"], arrays[spec["theta"]])
    if t == "ResidualMarginals":
        return ResidualMarginals(spec["domain"], arrays[spec["weights"]])
    raise CacheError(f"unknown cached matrix type {t!r}")


def _decode_strategy(spec: dict[str, Any], arrays: dict[str, np.ndarray]) -> Strategy:
    t = spec["type"]
    if t == "KronStrategy":
        return KronStrategy(tuple(_decode_matrix(f, arrays) for f in spec["factors"]), operator=spec["operator"])
    if t == "UnionStrategy":
        parts = [_decode_strategy(p, arrays) for p in spec["parts"]]
        return UnionStrategy(parts, list(spec["weights"]), [list(g) for g in spec["groups"]], operator=spec["operator"])
    if t == "MarginalStrategy":
        fixed = spec["fixed"]
        if fixed is not None:
            fixed = tuple(None if f is None else _decode_matrix(f, arrays) for f in fixed)
        return MarginalStrategy(_decode_matrix(spec["strategy"], arrays), operator=spec["operator"], fixed=fixed)
    raise CacheError(f"unknown cached strategy type {t!r}")


class StrategyCache:
    """Selected strategies on disk, one atomic ``.npz`` file per key."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()

    def key(self, workload: Workload, noise: NoiseModel, **settings: Any) -> str:
        """The cache key for selecting a strategy for ``workload`` under ``noise``'s family."""
        payload = json.dumps(
            {"v": FORMAT_VERSION, "workload": workload.fingerprint(), "noise": noise.name, "settings": settings},
            sort_keys=True, default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.npz"

    def get(self, key: str) -> Strategy | None:
        """The cached strategy, or ``None`` on a miss or an unusable entry: unreadable, or (a file
        edited by hand, say) with entries that are not finite or a strategy that measures nothing."""
        path = self.path(key)
        try:
            with np.load(path, allow_pickle=False) as data:
                spec = json.loads(str(data["__spec__"]))
                arrays = {k: data[k] for k in data.files if k != "__spec__"}
            if not all(np.isfinite(a).all() for a in arrays.values() if a.dtype.kind in "fc"):
                return None
            strategy = _decode_strategy(spec, arrays)
            return strategy if strategy.sensitivity(1) > 0 and strategy.sensitivity(2) > 0 else None
        except FileNotFoundError:
            return None
        except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, CacheError, WorkloadError):
            return None

    def put(self, key: str, strategy: Strategy) -> Path:
        """Store ``strategy`` under ``key`` atomically; returns the entry's path."""
        enc = _Encoder()
        spec = enc.strategy(strategy)
        buffer = io.BytesIO()
        np.savez(buffer, __spec__=np.array(json.dumps(spec)), **enc.arrays)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".npz")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(buffer.getvalue())
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path(key))
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise CacheError(f"cannot write strategy cache entry in {self.directory}: {exc}") from exc
        return self.path(key)
