"""Source-database sync: reading a team's table with psycopg against dlt, and the whole sync's rate.

A table of `--rows` lessons (id, subject, body, kind, team, created_at, updated_at) in a second scratch database
stands for a team's own PostgreSQL. Measured in one run:

- psycopg: a server-side cursor fetching batches of 5,000 rows ordered by the watermark column, what
  `pipelines/source_sync.py` does;
- dlt (optional, `--dlt-python` naming a Python with `dlt[sql_database]` installed, kept out of the project's
  dependencies): `dlt.sources.sql_database.sql_table` with an incremental cursor on the same column, backends
  `sqlalchemy` and `pyarrow`, extraction only (rows in hand, nothing loaded);
- the whole sync (`source_sync.sync`: read, check, write through `write_items`, keyword-indexed) into the scratch
  memory database over the first `--sync-rows` rows (a range run: since/until), then the same range again (every
  row unchanged).

Either reader only hands rows to `write_items`, which checks them, keys them and keyword-indexes them; so the
reader is the only part dlt could replace.

    python bench/sync_extract.py [--rows 100000] [--sync-rows 20000] [--dlt-python /path/to/venv/bin/python]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import time
from pathlib import Path

import psycopg
from _common import log, machine, note, save_result, scratch, sentence
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.operations.source_sync import SyncSpec, sync

RESULTS = Path(__file__).parent / "results" / "sync_extract.json"
BATCH = 5_000
START = dt.datetime(2023, 1, 1, tzinfo=dt.UTC)

DLT_SCRIPT = """
import json, sys, time
import dlt
from dlt.sources.sql_database import sql_table
url, backend = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
table = sql_table(credentials=url, table="lessons",
                  backend=backend, chunk_size=5000, incremental=dlt.sources.incremental("updated_at"))
rows = sum(c.num_rows if hasattr(c, "num_rows") else len(c) if isinstance(c, list) else 1 for c in table)
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0}))
"""


def load_source(url: str, rows: int) -> None:
    rng = random.Random(4)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE lessons (id bigserial PRIMARY KEY, subject text NOT NULL, body text, kind text,"
                     " team text NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL)")
        with conn.cursor() as cur, cur.copy("COPY lessons (subject, body, kind, team, created_at, updated_at)"
                                            " FROM STDIN") as copy:
            for i in range(rows):
                when = START + dt.timedelta(minutes=i)
                copy.write_row((note(rng)[0], f"{sentence(rng)}. {sentence(rng)}.", "dev", "team-a", when, when))
        conn.execute("CREATE INDEX ON lessons (updated_at)")
        conn.execute("VACUUM ANALYZE lessons")


def read_psycopg(url: str) -> dict:
    t0 = time.perf_counter()
    n = 0
    with psycopg.connect(url) as conn, conn.cursor(name="bench_sync") as cur:
        cur.itersize = BATCH
        cur.execute(sql.SQL("SELECT id, subject, body, kind, created_at, team, updated_at FROM lessons"
                            " ORDER BY updated_at"))
        while rows := cur.fetchmany(BATCH):
            n += len(rows)
    seconds = time.perf_counter() - t0
    return {"rows": n, "seconds": round(seconds, 2), "rows_per_second": round(n / seconds, 1)}


def sqlalchemy_url(conninfo: str) -> str:
    """The SQLAlchemy URL (psycopg 3 driver) of a libpq connection string."""
    from urllib.parse import quote

    d = conninfo_to_dict(conninfo)
    auth = quote(d.get("user", "postgres")) + (f":{quote(d['password'])}" if d.get("password") else "")
    host = d.get("host", "")
    if host.startswith("/"):  # a Unix socket folder
        where = f"@/{d['dbname']}?host={quote(host)}" + (f"&port={d['port']}" if d.get("port") else "")
    else:
        where = f"@{host}:{d.get('port', 5432)}/{d['dbname']}"
    return f"postgresql+psycopg://{auth}{where}"


def read_dlt(python: str, url: str, backend: str) -> dict:
    done = subprocess.run([python, "-c", DLT_SCRIPT, sqlalchemy_url(url), backend], capture_output=True, text=True,
                          check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return {"backend": backend, "rows": got["rows"], "seconds": round(got["seconds"], 2),
            "rows_per_second": round(got["rows"] / got["seconds"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--sync-rows", type=int, default=20_000)
    ap.add_argument("--dlt-python", help="a Python that has dlt[sql_database] and psycopg installed")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    out: dict = {"benchmark": "sync_extract", "rows": args.rows, "machine_before": machine()}
    with scratch(384) as source_url, scratch(384) as memory_url:
        log(f"loading {args.rows} rows into the source table")
        load_source(source_url, args.rows)
        log("psycopg server-side cursor")
        out["psycopg"] = read_psycopg(source_url)
        log(f"  {out['psycopg']['rows_per_second']} rows/s")
        if args.dlt_python:
            out["dlt"] = []
            for backend in ("sqlalchemy", "pyarrow"):
                log(f"dlt sql_table, backend {backend}")
                got = read_dlt(args.dlt_python, source_url, backend)
                out["dlt"].append(got)
                log(f"  {got['rows_per_second']} rows/s")
        spec = SyncSpec(name="bench", url=source_url, table=("public", "lessons"), source="learning",
                        watermark="updated_at", owner_column="team",
                        columns={"key": "id", "title": "subject", "content": "body", "task_type": "kind",
                                 "at": "created_at"})
        pool = get_pool(memory_url)
        until = START + dt.timedelta(minutes=args.sync_rows)
        log(f"the whole sync over the first {args.sync_rows} rows")
        first = sync(pool, spec, since=START, until=until)
        keep = ("rows_read", "created", "unchanged", "seconds", "rows_per_second")
        out["sync"] = {k: first.as_dict()[k] for k in keep}
        log(f"  {out['sync']}")
        out["sync_again"] = {k: sync(pool, spec, since=START, until=until).as_dict()[k] for k in keep}
    save_result(out, args.out)


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
