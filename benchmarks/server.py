"""Server benchmark: a cached COUNT … GROUP BY through ``dpsql serve``, against plain DuckDB served
by the same protocol code, with 1, 8 and 32 concurrent clients.

Both servers run as processes of their own on loopback, over the same generated table
(a DuckDB file); the clients are psycopg 3 connections in threads of this process, each
sending the statement in a loop for ``--seconds``. The dpsql statement spends a small
epsilon per request against analysts whose parts are far larger (its strategy is
selected once, before timing); the plain one is the same GROUP BY with no noise. Reported
per server and client count: requests per second and p50 / p99 latency, and the ratios
dpsql / plain measured in the same run. Goal: p50 within 2x of plain DuckDB at 10 million rows.

    python benchmarks/server.py                       # 10 million rows
    python benchmarks/server.py --rows 1000000 --seconds 5 --clients 1 8
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psycopg
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dpsql.server.scram import make_verifier  # noqa: E402

PASSWORD = "bench-password"
ANALYSTS = [f"a{i}" for i in range(4)]
STATEMENT = "SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region"
EPSILON = 1e-3

PLAIN_SERVER = """
import sys, duckdb
sys.path.insert(0, {tests!r})
from pgwire_duckdb import DuckDBSession
from dpsql.server.pgwire import Limits, Server
from dpsql.server.scram import make_verifier
con = duckdb.connect({db!r}, read_only=True)
verifier = make_verifier({password!r})
from dpsql.server.scram import parse_verifier
v = parse_verifier(verifier)
server = Server(host="127.0.0.1", port=0, authenticate=lambda user: v,
                open_session=lambda user, database, params: DuckDBSession(con.cursor()), limits=Limits())
thread = server.run_in_thread()
print(f"ready on 127.0.0.1:{{thread.port}} ", flush=True)
sys.stdin.read()
"""


def make_data(d: Path, rows: int) -> None:
    con = duckdb.connect(str(d / "people.duckdb"))
    con.execute(f"""CREATE TABLE people AS SELECT CASE WHEN hash(i) % 2 = 0 THEN 'F' ELSE 'M' END AS sex,
                    ['N', 'E', 'S', 'W'][1 + (hash(i * 7) % 4)::INT] AS region, (hash(i * 13) % 100)::INT AS age
                    FROM range({rows}) t(i)""")
    con.close()
    schema = {"table": "people", "columns": {"sex": {"type": "categorical", "values": ["F", "M"]},
                                             "region": {"type": "categorical", "values": ["N", "E", "S", "W"]},
                                             "age": {"type": "integer", "min": 0, "max": 99}}}
    (d / "people.yaml").write_text(yaml.safe_dump(schema))
    verifier = make_verifier(PASSWORD)
    config = {"listen": {"host": "127.0.0.1", "port": 0},
              "limits": {"statements_per_second": 100000, "max_connections": 256},
              "datasets": {"people": {"source": "people.duckdb", "schema": "people.yaml", "ledger": "people.ledger",
                                      "budget": {"epsilon": 1e9}}},
              "analysts": {a: {"password": verifier, "budgets": {"people": {"epsilon": 1e8}}} for a in ANALYSTS}}
    (d / "serve.yaml").write_text(yaml.safe_dump(config))


def start(argv: list[str], env: dict, stdin: bool = False) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            text=True, env=env, cwd=ROOT)
    lines = []
    for _ in range(20):  # the ready line, after any line the server prints before it
        lines.append(proc.stdout.readline())
        match = re.search(r":(\d+) ", lines[-1])
        if match is not None or not lines[-1]:
            break
    line = "".join(lines)
    if match is None:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(match.group(1))


def load(port: int, sql: str, clients: int, seconds: float, users: list[str]) -> tuple[float, list[float]]:
    """Requests per second and every request's latency, ``clients`` connections for ``seconds``."""
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    stop = time.monotonic() + 3600

    def client(i: int) -> None:
        nonlocal stop
        dsn = f"host=127.0.0.1 port={port} user={users[i % len(users)]} password={PASSWORD} dbname=people"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql, prepare=False).fetchall()  # warm: the strategy is selected once, here
            barrier.wait()
            mine = []
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                conn.execute(sql, prepare=False).fetchall()
                mine.append(time.perf_counter() - t0)
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    began = time.monotonic()
    stop = began + seconds
    for t in threads:
        t.join()
    return len(latencies) / (time.monotonic() - began), latencies


def quantile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q * 100) - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        t0 = time.perf_counter()
        make_data(d, args.rows)
        print(f"# python benchmarks/server.py --rows {args.rows} --seconds {args.seconds:g}   "
              f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start)")
        print(f"{args.rows:,} rows generated in {time.perf_counter() - t0:.1f} s; statement: {STATEMENT}")
        env = dict(os.environ, PYTHONPATH=str(ROOT), DPSQL_CACHE_DIR=str(d / "cache"))
        t0 = time.perf_counter()
        dp, dp_port = start([sys.executable, "-m", "dpsql", "serve", str(d / "serve.yaml"), "--port", "0"], env)
        # the server validates the file and takes its snapshot (dpsql.private.measure.take_snapshot) at start
        print(f"dpsql serve ready in {time.perf_counter() - t0:.1f} s (validation and the owner's snapshot)")
        script = PLAIN_SERVER.format(tests=str(ROOT / "tests"), db=str(d / "people.duckdb"), password=PASSWORD)
        plain, plain_port = start([sys.executable, "-c", script], env, stdin=True)
        try:
            private_sql = STATEMENT.replace("SELECT", f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = {EPSILON})",
                                            1)
            print(f"\n{'clients':>7} | {'dpsql req/s':>11} {'p50 ms':>8} {'p99 ms':>8} | {'plain req/s':>11} "
                  f"{'p50 ms':>8} {'p99 ms':>8} | {'p50 ratio':>9} {'req/s ratio':>11}")
            for clients in args.clients:
                rate_d, lat_d = load(dp_port, private_sql, clients, args.seconds, ANALYSTS)
                rate_p, lat_p = load(plain_port, STATEMENT, clients, args.seconds, ["plain"])
                p50d, p99d = quantile(lat_d, 0.5) * 1e3, quantile(lat_d, 0.99) * 1e3
                p50p, p99p = quantile(lat_p, 0.5) * 1e3, quantile(lat_p, 0.99) * 1e3
                print(f"{clients:>7} | {rate_d:>11.1f} {p50d:>8.1f} {p99d:>8.1f} | {rate_p:>11.1f} {p50p:>8.1f} "
                      f"{p99p:>8.1f} | {p50d / p50p:>9.2f} {rate_d / rate_p:>11.2f}")
            print("\ngoal: p50 ratio <= 2 (dpsql through the server / plain DuckDB through the same protocol code)")
        finally:
            dp.kill()
            plain.stdin.close()
            plain.kill()


if __name__ == "__main__":
    main()
