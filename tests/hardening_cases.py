"""Generated hostile / malformed / unusual inputs for the hardening suite (issue 13).

Each builder writes one input under a directory and returns its path. The
expectation says what a correct run of ``traceread`` does with it:
``error`` (exit 1, one ``traceread: error:`` line, optionally containing a
phrase), ``ok`` (exit 0) or ``partial`` (exit 0 plus one ``warning`` line: a
truncated trace analysed as far as it goes).
"""
from __future__ import annotations

import gzip
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


def event(i: int, name: str | None = None, **kw) -> dict:
    """One host op + nothing else: enough for a valid, analysable Kineto event."""
    e = {"ph": "X", "cat": "cpu_op", "name": name if name is not None else f"aten::op{i % 7}",
         "pid": 1, "tid": 1, "ts": 1000 + 10 * i, "dur": 5, "args": {"External id": i}}
    e.update(kw)
    return e


def kernel(i: int) -> list[dict]:
    """A runtime launch and its kernel (so the trace has a GPU)."""
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 1000 + 10 * i, "dur": 2, "args": {"correlation": i}},
            {"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7,
             "ts": 1003 + 10 * i, "dur": 4, "args": {"correlation": i, "device": 0,
                                                      "stream": 7}}]


def events(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append(event(i))
        out.extend(kernel(i))
    return out


def doc_bytes(evs: list, tail: dict | None = None, head: dict | None = None) -> bytes:
    """Kineto layout: header keys, then traceEvents one per line, then trailing keys."""
    parts = [b"{"]
    for k, v in (head or {"schemaVersion": 1}).items():
        parts.append(json.dumps(k).encode() + b": " + json.dumps(v).encode() + b",\n")
    parts.append(b'"traceEvents": [\n')
    parts.append(b",\n".join(json.dumps(e).encode() for e in evs))
    parts.append(b"\n]")
    for k, v in (tail or {"traceName": "t", "baseTimeNanoseconds": 1700000000000000000}).items():
        parts.append(b",\n" + json.dumps(k).encode() + b": " + json.dumps(v).encode())
    parts.append(b"}\n")
    return b"".join(parts)


def write(d: Path, name: str, data: bytes) -> Path:
    p = d / name
    p.write_bytes(data)
    return p


@dataclass
class Case:
    name: str
    build: Callable[[Path], Path]
    expect: str                 # "error" | "ok" | "partial"
    phrase: str = ""            # must appear in the error / warning line
    slow: bool = False
    hang: bool = False          # could hang or blow up: run in a subprocess under a timeout,
                                # with its peak RSS checked


# ----------------------------------------------------------------- builders

def valid(d):
    return write(d, "valid.json", doc_bytes(events(50)))


def bracket_flood(d, n=2_000_000):
    return write(d, "flood.json", doc_bytes(events(20))[:-2] + b"]" * n + b"}")


def bracket_flood_big(d):
    # > STREAM_MIN_BYTES: the streaming reader's end-of-array search
    return write(d, "flood_big.json", doc_bytes(events(20))[:-2] + b"]" * (40 << 20) + b"}")


def brace_flood_big(d):
    return write(d, "brflood_big.json", doc_bytes(events(20))[:-2] + b"]}" * (20 << 20))


def invalid_utf8_name(d):
    data = doc_bytes(events(20)).replace(b'"aten::op3"', b'"aten::\xff\xfeop3"', 1)
    return write(d, "badutf8.json", data)


def name_is_object(d):
    evs = events(20)
    evs[5]["name"] = {"x": 1}
    return write(d, "nameobj.json", doc_bytes(evs))


def name_is_list(d):
    evs = events(20)
    evs[5]["name"] = [1, 2]
    return write(d, "namelist.json", doc_bytes(evs))


def deep_args(d, depth=20_000):
    evs = events(20)
    data = doc_bytes(evs).replace(b'"args": {"External id": 3}',
                                  b'"args": {"External id": 3, "deep": ' + b"[" * depth
                                  + b"]" * depth + b"}", 1)
    return write(d, "deep.json", data)


def deep_args_unclosed(d, depth=20_000):
    evs = events(20)
    data = doc_bytes(evs).replace(b'"args": {"External id": 3}',
                                  b'"args": {"External id": 3, "deep": ' + b"[" * depth + b"}", 1)
    return write(d, "deep_bad.json", data)


def base_time_huge(d):
    return write(d, "base70.json", doc_bytes(events(20), tail={"baseTimeNanoseconds": 2 ** 70}))


def ts_near_int64(d):
    evs = events(20)
    for e in evs:
        e["ts"] = 9_223_372_036_854_000 + (e["ts"] - 1000)  # µs: ns just below 2**63
        e["dur"] = 10_000
    return write(d, "ts_int64.json", doc_bytes(evs, tail={}))


def ts_1e308(d):
    evs = events(20)
    evs[4]["ts"] = 1e308
    return write(d, "ts1e308.json", doc_bytes(evs, tail={}))


def ts_base_overflow(d):
    evs = events(20)
    return write(d, "base_ovf.json", doc_bytes(evs, tail={"baseTimeNanoseconds": 2 ** 63 - 10}))


def ts_plus_base_overflow(d):
    return write(d, "base_ts_ovf.json", doc_bytes(events(20), tail={"baseTimeNanoseconds": 2 ** 62 - 100}))


def truncated(d):
    data = doc_bytes(events(200))
    return write(d, "cut.json", data[: len(data) * 2 // 3])


def truncated_gz(d):
    data = gzip.compress(doc_bytes(events(2000)))
    return write(d, "cut.json.gz", data[: len(data) * 2 // 3])


def truncated_after_brace(d):
    data = doc_bytes(events(200))
    cut = data.index(b"},\n", len(data) // 2) + 1
    return write(d, "cut_brace.json", data[:cut])


def truncated_in_header(d):
    return write(d, "cut_head.json", b'{"schemaVersion": 1, "deviceProp')


def big_last_event(d, big=2 << 20):
    evs = events(50)
    evs.append(event(999, args={"blob": "x" * big}))
    return write(d, "biglast.json", doc_bytes(evs))


def pathological_name(d):
    evs = events(200)
    # a compile-marker regex backtracked over the rest of the name for every "_data: "
    evs[10]["name"] = "_data: " * 300_000
    return write(d, "pathname.json", doc_bytes(evs))


def unmatched_b(d, n=200_000):
    evs = events(20) + [{"ph": "B", "name": f"b{i % 50}", "pid": 1, "tid": 1, "ts": 2000 + i,
                         "cat": "cpu_op"} for i in range(n)]
    return write(d, "unmatched_b.json", doc_bytes(evs))


def many_names_one_long(d, n=20_000):
    evs = [event(i, name=f"op_{i}") for i in range(n)]
    evs[7]["name"] = "L" * 50_000
    return write(d, "longname.json", doc_bytes(evs + events(10)))


def fifo(d):
    p = d / "pipe.json"
    os.mkfifo(p)
    return p


def dev_null(d):
    return Path("/dev/null")


def dev_zero(d):
    return Path("/dev/zero")


def directory(d):
    p = d / "adir.json"
    p.mkdir()
    return p


def unreadable(d):
    p = write(d, "secret.json", doc_bytes(events(5)))
    p.chmod(0)
    return p


def empty(d):
    return write(d, "empty.json", b"")


def nsys_db(path: Path, extra_sql: str = "", wal: bool = False) -> Path:
    con = sqlite3.connect(path)
    if wal:
        con.execute("PRAGMA journal_mode=WAL")
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'k0'), (2, 'cudaLaunchKernel');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT,
            correlationId INT, globalPid INT, demangledName INT, shortName INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 200, 0, 7, 1, 16777216, 1, 1),
            (300, 400, 0, 7, 2, 16777216, 1, 1);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT,
            correlationId INT, nameId INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (90, 95, 16777217, 1, 2),
            (290, 295, 16777217, 2, 2);
    """ + extra_sql)
    con.commit()
    con.close()
    return path


def nsys_valid(d):
    return nsys_db(d / "ok.sqlite")


def nsys_wal(d):
    p = nsys_db(d / "wal.sqlite", wal=True)
    return p


def nsys_recursive_view(d):
    return nsys_db(d / "recview.sqlite", extra_sql="""
        DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;
        CREATE VIEW CUPTI_ACTIVITY_KIND_RUNTIME AS
          WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
          SELECT x AS start, x AS end, 0 AS globalTid, x AS correlationId, 2 AS nameId FROM c;
    """)


def nsys_recursive_view_other(d):
    # a view we do not read still must not be executed
    return nsys_db(d / "recview2.sqlite", extra_sql="""
        CREATE VIEW NVTX_EVENTS AS
          WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
          SELECT x AS start, x AS end, 0 AS globalTid, NULL AS text, 59 AS eventType,
                 NULL AS textId, NULL AS domainId, NULL AS rangeId FROM c;
    """)


def nsys_garbage(d):
    data = nsys_db(d / "g.sqlite").read_bytes()
    return write(d, "garbage.sqlite", data[:100] + b"\x00" * 50 + data[150:400])


CASES = [
    Case("valid", valid, "ok"),
    Case("bracket_flood", bracket_flood, "error", "invalid JSON", hang=True),
    Case("bracket_flood_big", bracket_flood_big, "error", "invalid JSON", slow=True),
    Case("brace_flood_big", brace_flood_big, "error", "invalid JSON", slow=True),
    Case("invalid_utf8_name", invalid_utf8_name, "ok"),
    Case("name_is_object", name_is_object, "error", "name is not a string"),
    Case("name_is_list", name_is_list, "error", "name is not a string"),
    Case("deep_args", deep_args, "error", "nesting deeper than", hang=True),
    Case("deep_args_unclosed", deep_args_unclosed, "error", "nesting deeper than"),
    Case("base_time_huge", base_time_huge, "error", "baseTimeNanoseconds"),
    Case("ts_near_int64", ts_near_int64, "error", "out of range"),
    Case("ts_1e308", ts_1e308, "error", "out of range"),
    Case("ts_base_overflow", ts_base_overflow, "error", "out of range"),
    Case("ts_plus_base_overflow", ts_plus_base_overflow, "error", "timestamp out of range at event"),
    Case("truncated", truncated, "partial", "truncated"),
    Case("truncated_gz", truncated_gz, "partial", "truncated"),
    Case("truncated_after_brace", truncated_after_brace, "partial", "truncated"),
    Case("truncated_in_header", truncated_in_header, "error", "truncated"),
    Case("big_last_event", big_last_event, "ok"),
    Case("pathological_name", pathological_name, "ok", hang=True),
    Case("unmatched_b", unmatched_b, "ok", slow=True, hang=True),
    Case("many_names_one_long", many_names_one_long, "ok", hang=True),
    Case("huge_name", lambda d: huge_name(d, 8 << 20), "ok", hang=True),
    Case("fifo", fifo, "error", "FIFO", hang=True),
    Case("dev_null", dev_null, "error", "not a regular file"),
    Case("dev_zero", dev_zero, "error", "not a regular file", hang=True),
    Case("directory", directory, "error", "directory"),
    Case("unreadable", unreadable, "error", "permission denied"),
    Case("empty", empty, "error", "empty"),
    Case("nsys_valid", nsys_valid, "ok"),
    Case("nsys_wal", nsys_wal, "ok"),
    Case("nsys_recursive_view", nsys_recursive_view, "error", "view", hang=True),
    Case("nsys_recursive_view_other", nsys_recursive_view_other, "error", "view", hang=True),
    Case("nsys_garbage", nsys_garbage, "error", ""),
]


def huge_name(d, size=50 << 20):
    evs = events(20)
    evs[3]["name"] = "N" * size
    return write(d, "hugename.json", doc_bytes(evs))
