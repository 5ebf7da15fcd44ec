"""Peer implementations run beside dpsql in the benchmarks, each in an environment of its own.

``peers.dpmm`` runs the AIM and MST generators of the PyPI package dpmm, whose
pinned numpy/pandas clash with ours, in a separate venv under
``benchmarks/.peer_venvs/`` (git-ignored).
"""
