"""Synthetic Nsight Systems SQLite exports with planted truth.

``NsysWriter`` writes the real nsys table and column names (a subset of the
columns of each table) in one of three schema flavours seen in the wild:

* ``"3.x"``   -- ``META_DATA_EXPORT``, ENUM tables, ``TARGET_INFO_GPU.id``/``cuDevice``;
* ``"2.9.1"`` -- ``EXPORT_META_DATA``, a ``name`` column on the runtime table, no ENUM tables;
* ``"pre2"``  -- no metadata table, ``TARGET_INFO_GPU`` keyed by ``deviceId``.

``write_planted`` writes a small two-process scenario whose kernel, gap and API
statistics are known exactly; ``PLANTED`` documents the numbers tests assert.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMAS = ("3.x", "2.9.1", "pre2")


def gpid(pid: int) -> int:
    """nsys globalPid: hardware/vm id in the top bits, pid in bits 24..47."""
    return (1 << 56) | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


class NsysWriter:
    """Append rows to a fresh nsys-shaped SQLite file; ``close()`` to finish."""

    def __init__(self, path: str | Path, schema: str = "3.x"):
        if schema not in SCHEMAS:
            raise ValueError(f"schema must be one of {SCHEMAS}")
        self.path = Path(path)
        if self.path.exists():
            self.path.unlink()
        self.schema = schema
        self.con = sqlite3.connect(str(self.path))
        self.strings: dict[bytes, int] = {}
        self._has_graph_col = False
        self._has_graph_trace = False
        self._create()

    # -- schema
    def _create(self) -> None:
        x = self.con.execute
        x("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        x("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
          "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, "
          "shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER, blockX INTEGER)")
        x("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
          "correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, "
          "copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER)")
        x("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
          "correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL)")
        name_col = ", name TEXT" if self.schema == "2.9.1" else ""
        x("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, "
          f"nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER{name_col})")
        x("CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, "
          "end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
          "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
          "syncType INTEGER NOT NULL, eventId INTEGER NOT NULL)")
        x("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
          "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, "
          "endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, "
          "int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
          "floatValue REAL, jsonTextId INTEGER, jsonText TEXT)")
        x("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "eventClass INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL, "
          "returnValue INTEGER NOT NULL, nestingLevel INTEGER, callchainId INTEGER)")
        x("CREATE TABLE PROFILER_OVERHEAD (start INTEGER NOT NULL, end INTEGER NOT NULL, "
          "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL)")
        x("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
        x("CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER)")
        x("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, "
          "localTime TEXT)")
        if self.schema == "pre2":
            x("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
              "name TEXT, busLocation TEXT, isDiscrete INTEGER)")
        else:
            x("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, "
              "name TEXT, busLocation TEXT, totalMemory INTEGER, smCount INTEGER, cuDevice INTEGER)")
        if self.schema == "3.x":
            x("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
            x("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
            x("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_KIND_HTOD', "
              "'Host-to-Device'), (2, 'CUDA_MEMCPY_KIND_DTOH', 'Device-to-Host')")
            self._meta("META_DATA_EXPORT", "3.25.0", "2026.2.1.210")
        elif self.schema == "2.9.1":
            x("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)")
            self._meta("EXPORT_META_DATA", "2.9.1", "2022.2.1.31")

    def _meta(self, table: str, schema: str, product: str) -> None:
        rows = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                ("EXPORT_PRODUCT_VERSION", product), ("EXPORT_SCHEMA_VERSION", schema)]
        self.con.executemany(f"INSERT INTO {table} VALUES (?, ?)", rows)

    # -- rows
    def sid(self, value: str | bytes) -> int:
        """Intern a string (bytes are stored as-is: may be invalid UTF-8)."""
        b = value.encode() if isinstance(value, str) else value
        if b not in self.strings:
            self.strings[b] = len(self.strings) + 1
            text = b.decode("utf-8", "surrogateescape") if isinstance(value, str) else None
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)",
                             (self.strings[b], text if text is not None else b))
            if text is None:  # store raw bytes as TEXT, like a tool writing Latin-1 would
                self.con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?",
                                 (b, self.strings[b]))
        return self.strings[b]

    def kernel(self, start, end, name, pid, device=0, stream=7, corr=0, ctx=1, short=None,
               graph_id=None, grid=1, block=128):
        """A kernel; ``graph_id`` (a graph replay's node, --cuda-graph-trace=node) adds the
        graphId column to the table, as exports of captures with graph launches have."""
        self.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, "
                         "streamId, correlationId, globalPid, demangledName, shortName, "
                         "mangledName, gridX, blockX) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                         (start, end, device, ctx, stream, corr, gpid(pid), self.sid(name),
                          self.sid(short or name.split("(")[0]), None, grid, block))
        if graph_id is not None:
            if not self._has_graph_col:
                self.con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphId INTEGER")
                self._has_graph_col = True
            self.con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphId = ? WHERE rowid = "
                             "last_insert_rowid()", (graph_id,))

    def graph_trace(self, start, end, pid, graph_id, device=0, stream=7, corr=0, ctx=1,
                    exec_id=None):
        """One graph replay (nsys's default --cuda-graph-trace=graph). nsys creates the
        table lazily: it exists only once a row is written. Columns of nsys 2024-2025."""
        if not self._has_graph_trace:
            self.con.execute(
                "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, "
                "end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
                "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, "
                "globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL)")
            self._has_graph_trace = True
        self.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (start, end, device, ctx, 0, stream, corr, gpid(pid), graph_id,
                          graph_id if exec_id is None else exec_id))

    # nsys memory kinds (ENUM_CUDA_MEM_KIND): 0 pageable, 1 pinned, 2 device
    _MEM = {1: (1, 2), 2: (2, 1), 8: (2, 2)}

    def memcpy(self, start, end, nbytes, copy_kind, pid, device=0, stream=7, corr=0, ctx=1,
               pageable=False):
        src, dst = self._MEM.get(copy_kind, (2, 2))
        if pageable:
            src, dst = (0, dst) if copy_kind == 1 else (src, 0)
        self.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                         (start, end, device, ctx, stream, corr, gpid(pid), nbytes, copy_kind,
                          src, dst))

    def memset(self, start, end, nbytes, pid, device=0, stream=7, corr=0, ctx=1):
        self.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?,?)",
                         (start, end, device, ctx, stream, corr, gpid(pid), 0, nbytes))

    def runtime(self, start, end, name, pid, tid, corr=0, event_class=0):
        vals = [start, end, event_class, gtid(pid, tid), corr, self.sid(name), 0, None]
        if self.schema == "2.9.1":
            vals.append(None)
        marks = ",".join("?" * len(vals))
        self.con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({marks})", vals)

    def sync(self, start, end, pid, device=0, stream=7, corr=0, sync_type=3, ctx=1):
        self.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?,?)",
                         (start, end, device, ctx, stream, corr, gpid(pid), sync_type, 0))

    def nvtx_domain(self, domain_id: int, name: str, pid: int, tid: int) -> None:
        self._nvtx(0, None, 75, name, None, gtid(pid, tid), domain_id)

    def nvtx_range(self, start, end, text, pid, tid, domain_id=0, push_pop=True, as_id=False):
        """Push/pop (59) or start/end (60) range; ``end=None`` = never closed."""
        self._nvtx(start, end, 59 if push_pop else 60, None if as_id else text,
                   self.sid(text) if as_id else None, gtid(pid, tid), domain_id)

    def nvtx_mark(self, ts, text, pid, tid, domain_id=0):
        self._nvtx(ts, None, 34, text, None, gtid(pid, tid), domain_id)

    def _nvtx(self, start, end, etype, text, text_id, g, domain):
        self.con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, "
                         "domainId) VALUES (?,?,?,?,?,?,?)", (start, end, etype, text, g, text_id,
                                                              domain))

    def osrt(self, start, end, name, pid, tid):
        self.con.execute("INSERT INTO OSRT_API VALUES (?,?,?,?,?,?,?,?)",
                         (start, end, 27, gtid(pid, tid), self.sid(name), 0, 0, None))

    def overhead(self, start, end, name, pid, tid):
        self.con.execute("INSERT INTO PROFILER_OVERHEAD VALUES (?,?,?,?,?)",
                         (start, end, gtid(pid, tid), self.sid(name), 0))

    def process(self, pid, name):
        self.con.execute("INSERT INTO PROCESSES VALUES (?,?,?)", (gpid(pid), pid, name))

    def thread(self, pid, tid, name):
        self.con.execute("INSERT INTO ThreadNames VALUES (?,?,?)", (self.sid(name), 0, gtid(pid, tid)))

    def gpu(self, device, name):
        if self.schema == "pre2":
            self.con.execute("INSERT INTO TARGET_INFO_GPU VALUES (?,?,?,?,?)",
                             (0, device, name, f"0000:0{device}:00.0", 1))
        else:
            self.con.execute("INSERT INTO TARGET_INFO_GPU VALUES (?,?,?,?,?,?,?)",
                             (0, device + 10, name, f"0000:0{device}:00.0", 80 << 30, 132, device))

    def session_start(self, utc_ns: int) -> None:
        self.con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?,?,?)",
                         (utc_ns, "", ""))

    def foreign_table(self, name: str = "EXTRAP_GPU_IDLE") -> None:
        self.con.execute(f"CREATE TABLE {name} (a INTEGER, b TEXT)")
        self.con.execute(f"INSERT INTO {name} VALUES (1, 'x')")

    def close(self) -> Path:
        self.con.commit()
        self.con.close()
        return self.path


# ---------------------------------------------------------------- planted scenario

GEMM = "void gemm_kernel<float>(float *, int)"
RELU = "relu_kernel(float *)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"
FLUSH = "CUDA profiling data flush overhead"
EPOCH = 1_700_000_000_000_000_000

# Exact truth for ``write_planted`` (all times ns).
PLANTED = {
    # (name, total, instances, avg, med, min, max, sample stddev), nsys order
    "kernels": [
        (GEMM, 9000, 3, 3000.0, 3000.0, 1000, 5000, 2000.0),
        (NCCL, 4000, 1, 4000.0, 4000.0, 4000, 4000, 0.0),
        (RELU, 3000, 2, 1500.0, 1500.0, 1000, 2000, 707.1067811865476),
        ("early_kernel()", 400, 1, 400.0, 400.0, 400, 400, 0.0),
    ],
    # every idle hole (min_gap 0), as (start, end, pid, device), sorted by start
    "gaps": [(4000, 20000, 200, 1), (5000, 10000, 100, 0), (11000, 12000, 100, 0),
             (13000, 20000, 100, 0), (25000, 30000, 100, 0)],
    # cuda_api_sum, nsys-compatible: (name, total, calls, avg, med)
    "api": [
        ("cudaLaunchKernel", 3000, 6, 500.0, 500.0),
        ("cudaMemcpyAsync", 700, 1, 700.0, 700.0),   # the CUDA-backtrace duplicate
        ("cudaMemcpyAsync", 600, 1, 600.0, 600.0),
        ("cudaStreamSynchronize", 100, 1, 100.0, 100.0),
        ("cudaStreamIsCapturing_v10000", 50, 1, 50.0, 50.0),
    ],
}


def write_planted(path: str | Path, schema: str = "3.x") -> Path:
    """Two processes (pid 100 on GPU 0, pid 200 on GPU 1) that reuse correlation ids.

    pid 100, device 0: GEMM [1000,2000) [2000,5000) [30000,35000), memcpy [10000,11000),
    memset [12000,13000) (a hole of exactly 1000 ns before it), a CUDA profiling flush
    overhead [20000,25000) that nsys counts as busy, and a kernel at [-500,-100)
    (before the session start, ignored by gaps). pid 200, device 1: RELU [1000,2000)
    [2000,4000), NCCL all-reduce [20000,24000).
    """
    w = NsysWriter(path, schema)
    w.session_start(EPOCH)
    w.process(100, "trainer")
    w.process(200, "trainer")
    w.thread(100, 101, "main")
    w.thread(200, 201, "main")
    w.gpu(0, "NVIDIA H100")
    w.gpu(1, "NVIDIA H100")
    # pid 100 (device 0)
    w.runtime(900, 1000, "cudaLaunchKernel_v7000", 100, 101, corr=1)
    w.kernel(1000, 2000, GEMM, 100, 0, corr=1)
    w.runtime(1000, 1500, "cudaLaunchKernel_v7000", 100, 101, corr=2)
    w.kernel(2000, 5000, GEMM, 100, 0, corr=2)
    w.runtime(9000, 9700, "cudaMemcpyAsync", 100, 101, corr=3, event_class=67)  # backtrace dup
    w.runtime(9050, 9650, "cudaMemcpyAsync_v3020", 100, 101, corr=3)
    w.memcpy(10000, 11000, 4096, 1, 100, 0, corr=3)
    w.memset(12000, 13000, 1024, 100, 0, corr=4)
    w.runtime(29000, 30000, "cudaLaunchKernel_v7000", 100, 101, corr=5)
    w.kernel(30000, 35000, GEMM, 100, 0, corr=5)
    w.overhead(20000, 25000, FLUSH, 100, 101)
    w.kernel(-500, -100, "early_kernel()", 100, 0, corr=0)  # before the session start
    w.runtime(36000, 36050, "cudaStreamIsCapturing_v10000", 100, 101, corr=6)
    w.runtime(36100, 36200, "cudaStreamSynchronize_v3020", 100, 101, corr=7, event_class=1)
    w.sync(36100, 36200, 100, 0, corr=7)
    # pid 200 (device 1) -- correlation ids 1..3 again
    w.runtime(800, 1000, "cudaLaunchKernel_v7000", 200, 201, corr=1)
    w.kernel(1000, 2000, RELU, 200, 1, corr=1)
    w.runtime(1000, 1700, "cudaLaunchKernel_v7000", 200, 201, corr=2)
    w.kernel(2000, 4000, RELU, 200, 1, corr=2)
    w.runtime(19000, 19500, "cudaLaunchKernel_v7000", 200, 201, corr=3)
    w.kernel(20000, 24000, NCCL, 200, 1, corr=3)
    # NVTX: a named NCCL domain, a default-domain push/pop, a start/end range by id,
    # a mark, and a range that never ended
    w.nvtx_domain(1, "NCCL", 200, 201)
    w.nvtx_range(19000, 25000, "ncclAllReduce", 200, 201, domain_id=1)
    w.nvtx_range(500, 36000, "step 0", 100, 101)
    w.nvtx_range(600, 5000, "forward", 100, 101, push_pop=False, as_id=True)
    w.nvtx_mark(700, "checkpoint", 100, 101)
    w.nvtx_range(40000, None, "unfinished", 100, 101)
    w.thread(100, 102, b"loader-caf\xe9")  # a Latin-1 (non-UTF-8) string in StringIds
    w.osrt(5000, 8000, "poll", 100, 102)
    w.foreign_table()
    return w.close()
