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
code) and the strategy's error on its workload. Writes go to a temporary file
in the same directory, are fsynced and then atomically renamed over the
target, so a reader sees either the old entry, the new one, or none, never a
torn file. A corrupt or unreadable entry is treated as a miss.

Entries are signed. Each file starts with an HMAC-SHA256, under a secret
key, of its cache key and its contents, and an entry whose signature does not
verify (written by anyone without the key, edited, or moved under another
key) is a miss. The key is 32 random bytes in a file readable by its owner
only (mode 0600, created atomically: written under a temporary name and
linked into place, so two processes agree on one key): beside the ledger
(``<ledger>.key``) when the connection has a ledger file, so that the cache
is trusted as far as the ledger is; else ``.key`` in the cache directory, one
per user and directory. A key file that is not a regular file owned by this
user with no access for others is not used, and the cache then answers
nothing. Threat model: someone who can write the cache directory but not
read the key (another user of a shared cache directory, a process given the
cache but not the ledger) can delete entries, which costs a selection, but
cannot make one be used. Whoever can read the key can also edit the ledger
and is trusted. A hit is also checked against the workload it is used for
(:func:`dpsql.hdmm.optimize.selector.select`): the strategy must answer it
with a finite error equal to the one recorded, or it is selected anew.

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
import hmac
import io
import json
import os
import secrets
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.errors import CacheError, WorkloadError
from dpsql.hdmm.hierarchy import HierarchyFactor, Tree
from dpsql.hdmm.marginals import Marginals, ResidualMarginals
from dpsql.hdmm.matrix import DENSE_LIMIT, Dense, GramFactored, Identity, Matrix, Ones, VStack, Weighted
from dpsql.hdmm.pidentity import PIdentity
from dpsql.hdmm.reconcile import ReconciledUnion
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, Strategy, UnionStrategy
from dpsql.hdmm.symmetric_gram import coefficients
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

#: Bump when the stored format or the optimizers change in a way that should invalidate entries
#: (3: keys are on the reduced workload, and the identity and direct candidates joined; 4: the
#: Gaussian per-attribute strategy no longer loses its optimum on cells no query reads; 5: entries
#: are signed and record their error).
FORMAT_VERSION = 5

#: Bytes of the signing key and of an entry's signature (HMAC-SHA256).
KEY_BYTES = SIGNATURE_BYTES = 32


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
        if isinstance(m, HierarchyFactor):
            return {"type": "HierarchyFactor", "n": m.tree.n, "labels": [self.array(a) for a in m.tree.labels],
                    "parent": self.array(m.tree.parent), "weights": list(m.weights)}
        if coefficients(m, dense_max=0) is not None:  # identities and totals, weighted and stacked (OPT_⊗'s
            if isinstance(m, Weighted):               # closed-form factors on a group key), kept implicit
                return {"type": "Weighted", "base": self.matrix(m.base), "weight": m.weight}
            return {"type": "VStack", "blocks": [self.matrix(b) for b in m.blocks]}
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
        if isinstance(s, ReconciledUnion):
            return {"type": "ReconciledUnion", "operator": s.operator, "weights": list(s.weights), "groups": s.groups,
                    "totals": s.totals, "shared": s.shared, "parts": [self.strategy(p) for p in s.parts]}
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
    if t == "HierarchyFactor":
        tree = Tree(spec["n"], [arrays[a] for a in spec["labels"]], arrays[spec["parent"]])
        return HierarchyFactor(tree, spec["weights"])
    if t == "Weighted":
        return Weighted(_decode_matrix(spec["base"], arrays), spec["weight"])
    if t == "VStack":
        return VStack([_decode_matrix(b, arrays) for b in spec["blocks"]])
    raise CacheError(f"unknown cached matrix type {t!r}")


def _decode_strategy(spec: dict[str, Any], arrays: dict[str, np.ndarray]) -> Strategy:
    t = spec["type"]
    if t == "KronStrategy":
        return KronStrategy(tuple(_decode_matrix(f, arrays) for f in spec["factors"]), operator=spec["operator"])
    if t == "UnionStrategy":
        parts = [_decode_strategy(p, arrays) for p in spec["parts"]]
        return UnionStrategy(parts, list(spec["weights"]), [list(g) for g in spec["groups"]], operator=spec["operator"])
    if t == "ReconciledUnion":
        return ReconciledUnion([_decode_strategy(p, arrays) for p in spec["parts"]], list(spec["weights"]),
                               [list(g) for g in spec["groups"]], list(spec["totals"]), spec["shared"],
                               operator=spec["operator"])
    if t == "MarginalStrategy":
        fixed = spec["fixed"]
        if fixed is not None:
            fixed = tuple(None if f is None else _decode_matrix(f, arrays) for f in fixed)
        return MarginalStrategy(_decode_matrix(spec["strategy"], arrays), operator=spec["operator"], fixed=fixed)
    raise CacheError(f"unknown cached strategy type {t!r}")


@dataclass(frozen=True)
class Entry:
    """A verified cache entry: the strategy and the error recorded with it (see :func:`unit_error`)."""

    strategy: Strategy
    error: float


def unit_error(workload: Workload, strategy: Strategy, norm: int) -> float:
    """``strategy``'s expected total squared error on ``workload`` per unit of noise variance, its
    sensitivity in ``norm`` included: what an entry records, the same for every ε of a family
    (``inf`` when the strategy cannot answer the workload)."""
    return strategy.sensitivity(norm) ** 2 * strategy.trace_error(workload)


class StrategyCache:
    """Selected strategies on disk, one signed, atomic ``.npz`` file per key. ``ledger``: the ledger
    file beside which the signing key is kept (``<ledger>.key``); None keeps it in the directory."""

    def __init__(self, directory: str | os.PathLike | None = None, ledger: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        self.key_file = Path(os.fspath(ledger) + ".key") if ledger is not None else self.directory / ".key"
        self._secret: bytes | None = None

    def key(self, workload: Workload, noise: NoiseModel, **settings: Any) -> str:
        """The cache key for selecting a strategy for ``workload`` under ``noise``'s family."""
        payload = json.dumps(
            {"v": FORMAT_VERSION, "workload": workload.fingerprint(), "noise": noise.name, "settings": settings},
            sort_keys=True, default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.npz"

    def get(self, key: str) -> Entry | None:
        """The cached entry, or ``None`` on a miss or an unusable entry: unreadable, not signed
        with this cache's key for ``key``, or (a bug that stored it) with entries that are not
        finite or a strategy that measures nothing."""
        path = self.path(key)
        try:
            blob = path.read_bytes()
            signature, body = blob[:SIGNATURE_BYTES], blob[SIGNATURE_BYTES:]
            if not hmac.compare_digest(signature, self._sign(key, body)):
                return None
            with np.load(io.BytesIO(body), allow_pickle=False) as data:
                spec = json.loads(str(data["__spec__"]))
                arrays = {k: data[k] for k in data.files if k != "__spec__"}
            if not all(np.isfinite(a).all() for a in arrays.values() if a.dtype.kind in "fc"):
                return None
            strategy = _decode_strategy(spec["strategy"], arrays)
            error = float(spec["error"])
            usable = strategy.sensitivity(1) > 0 and strategy.sensitivity(2) > 0
            return Entry(strategy, error) if usable else None
        except FileNotFoundError:
            return None
        except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, CacheError, WorkloadError):
            return None

    def put(self, key: str, strategy: Strategy, error: float) -> Path:
        """Store ``strategy`` with its ``error`` (:func:`unit_error`) under ``key``, signed and
        atomically; returns the entry's path."""
        enc = _Encoder()
        spec = {"strategy": enc.strategy(strategy), "error": float(error)}
        buffer = io.BytesIO()
        np.savez(buffer, __spec__=np.array(json.dumps(spec)), **enc.arrays)
        body = buffer.getvalue()
        try:
            signature = self._sign(key, body)
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".npz")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(signature + body)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path(key))
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            _fsync_directory(self.directory)
        except OSError as exc:
            raise CacheError(f"cannot write strategy cache entry in {self.directory}: {exc}") from exc
        return self.path(key)

    def _sign(self, key: str, body: bytes) -> bytes:
        """HMAC-SHA256 of ``key`` and ``body`` under the signing key."""
        return hmac.new(self._signing_key(), key.encode() + b"\0" + body, hashlib.sha256).digest()

    def _signing_key(self) -> bytes:
        """The signing key, read from :attr:`key_file` or created there (0600) if absent. Raises
        CacheError when it is unusable: not a regular file owned by this user, open to others, or
        not :data:`KEY_BYTES` long."""
        if self._secret is None:
            try:
                self._secret = _read_key(self.key_file)
            except FileNotFoundError:
                self._secret = _create_key(self.key_file)
            except OSError as exc:
                raise CacheError(f"cannot read the strategy cache's signing key {self.key_file}: {exc}") from exc
        return self._secret


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise CacheError(f"the strategy cache's signing key {path} must be a file owned by this user and "
                             "readable by it alone (mode 0600); entries are not used")
        secret = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(secret) != KEY_BYTES:
        raise CacheError(f"the strategy cache's signing key {path} is not {KEY_BYTES} bytes; entries are not used")
    return secret


def _create_key(path: Path) -> bytes:
    """A new key written to ``path`` (0600) atomically; the existing one if another process won the race."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # never replaces: two processes end with the same key
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
        _fsync_directory(path.parent)
        return _read_key(path)
    except OSError as exc:
        raise CacheError(f"cannot create the strategy cache's signing key {path}: {exc}") from exc


def _fsync_directory(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
