/* Two loops in C: the replay's fixed-point loop (passes/replay/sim.py), and the parents of
 * nested host rows (passes/factkit.py ``Stacks._parents``).
 *
 * The replay's fixed-point loop (passes/replay/sim.py) in C: the same sweeps, the same
 * topological pass, the same integers. sim.py's ``_sweeps_py`` is the reference; this file
 * follows it step for step (tests/test_csim.py compares both on every corpus graph and on
 * random graphs with cycles), so a build without a C compiler gives the same schedules.
 *
 * Arrays come in through the buffer protocol (contiguous int64, ``first`` as uint8), in the
 * lane order sim.py sorts the nodes into; ``end`` is read (the measured ends) and written (the
 * result), ``a`` / ``b`` receive the last sweep's ready times. Arithmetic wraps like numpy's
 * int64 (built with -fwrapv). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

/* One buffer argument: contiguous, 8-byte items (or 1-byte for ``first``), n items. */
static int get_buf(PyObject *o, Py_buffer *v, Py_ssize_t itemsize, int writable,
                   const char *what) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT |
                           (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (v->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes expected", what, itemsize);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* Kahn's algorithm exactly as sim._topological: the ready stack starts with the nodes of no
 * in-degree in index order, pops from its end, pushes the lane's next node and then the
 * out-edges in (stable) order, so a cycle leaves the same partial ends. Returns 1 when every
 * node was placed, 0 on a cycle, -1 out of memory. */
static int topological(Py_ssize_t n, const uint8_t *first, const i64 *gap, const i64 *cost,
                       const i64 *rel, Py_ssize_t ns, const i64 *s_src, const i64 *s_dst,
                       const i64 *s_lag, Py_ssize_t nd, const i64 *d_src, const i64 *d_dst,
                       const i64 *d_lag, i64 floor_, i64 *end) {
    Py_ssize_t m = ns + nd, k, i;
    int ok = -1;
    Py_ssize_t *in_ptr = calloc((size_t)n + 1, sizeof(Py_ssize_t));
    Py_ssize_t *out_ptr = calloc((size_t)n + 1, sizeof(Py_ssize_t));
    Py_ssize_t *in_e = malloc(((size_t)m + 1) * sizeof(Py_ssize_t));  /* edge ids by dst */
    Py_ssize_t *out_d = malloc(((size_t)m + 1) * sizeof(Py_ssize_t)); /* dst by src */
    Py_ssize_t *fill = malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
    Py_ssize_t *indeg = malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
    Py_ssize_t *stack = malloc(((size_t)n + 1) * sizeof(Py_ssize_t));
    if (!in_ptr || !out_ptr || !in_e || !out_d || !fill || !indeg || !stack)
        goto done;
#define SRC(e) ((e) < ns ? s_src[e] : d_src[(e) - ns])
#define DST(e) ((e) < ns ? s_dst[e] : d_dst[(e) - ns])
#define LAG(e) ((e) < ns ? s_lag[e] : d_lag[(e) - ns])
    /* in-edges by dst, stable (argsort(dst, kind="stable") of the concatenation) */
    for (k = 0; k < m; k++)
        in_ptr[DST(k) + 1]++;
    for (i = 0; i < n; i++)
        in_ptr[i + 1] += in_ptr[i];
    memcpy(fill, in_ptr, (size_t)n * sizeof(Py_ssize_t));
    for (k = 0; k < m; k++)
        in_e[fill[DST(k)]++] = k;
    /* out-edges by src, stable over the dst order */
    for (k = 0; k < m; k++)
        out_ptr[SRC(k) + 1]++;
    for (i = 0; i < n; i++)
        out_ptr[i + 1] += out_ptr[i];
    memcpy(fill, out_ptr, (size_t)n * sizeof(Py_ssize_t));
    for (k = 0; k < m; k++) {
        Py_ssize_t e = in_e[k];
        out_d[fill[SRC(e)]++] = DST(e);
    }
    Py_ssize_t top = 0, done_n = 0;
    for (i = 0; i < n; i++) {
        indeg[i] = in_ptr[i + 1] - in_ptr[i] + (first[i] ? 0 : 1);
        end[i] = 0;
    }
    for (i = 0; i < n; i++)
        if (indeg[i] == 0)
            stack[top++] = i;
    while (top) {
        Py_ssize_t v = stack[--top];
        done_n++;
        i64 s = rel[v] > floor_ ? rel[v] : floor_;
        if (!first[v] && end[v - 1] + gap[v] > s)
            s = end[v - 1] + gap[v];
        int has_e = 0;
        i64 e = 0;
        for (k = in_ptr[v]; k < in_ptr[v + 1]; k++) {
            Py_ssize_t x = in_e[k];
            i64 t = end[SRC(x)] + LAG(x);
            if (x >= ns) {
                if (!has_e || t > e) {
                    e = t;
                    has_e = 1;
                }
            } else if (t > s) {
                s = t;
            }
        }
        i64 e0 = s + cost[v];
        end[v] = (!has_e || e0 > e) ? e0 : e;
        if (v + 1 < n && !first[v + 1]) {
            if (--indeg[v + 1] == 0)
                stack[top++] = v + 1;
        }
        for (k = out_ptr[v]; k < out_ptr[v + 1]; k++) {
            Py_ssize_t w = out_d[k];
            if (--indeg[w] == 0)
                stack[top++] = w;
        }
    }
    ok = done_n == n;
#undef SRC
#undef DST
#undef LAG
done:
    free(in_ptr); free(out_ptr); free(in_e); free(out_d); free(fill); free(indeg); free(stack);
    return ok;
}

/* run(first, gap, cost, rel, C, s_src, s_dst, s_lag, d_src, d_dst, d_lag, end, a, b,
 *     max_sweeps, fast_sweeps, floor, neg) -> (sweeps, converged, swept) */
static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[14];
    Py_ssize_t k, i;
    long long max_sweeps, fast_sweeps, floor_, neg;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOLLLL", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13],
                          &max_sweeps, &fast_sweeps, &floor_, &neg))
        return NULL;
    static const char *names[14] = {"first", "gap", "cost", "rel", "C", "s_src", "s_dst",
                                    "s_lag", "d_src", "d_dst", "d_lag", "end", "a", "b"};
    Py_buffer v[14];
    int got = 0;
    PyObject *res = NULL;
    for (; got < 14; got++)
        if (get_buf(o[got], &v[got], got == 0 ? 1 : 8, got >= 11, names[got]) < 0)
            goto out;
    Py_ssize_t n = v[0].len;
    Py_ssize_t ns = v[5].len / 8, nd = v[8].len / 8;
    if (v[1].len / 8 != n || v[2].len / 8 != n || v[3].len / 8 != n || v[4].len / 8 != n ||
        v[11].len / 8 != n || v[12].len / 8 != n || v[13].len / 8 != n ||
        v[6].len / 8 != ns || v[7].len / 8 != ns || v[9].len / 8 != nd || v[10].len / 8 != nd) {
        PyErr_SetString(PyExc_ValueError, "array lengths differ");
        goto out;
    }
    const uint8_t *first = v[0].buf;
    const i64 *gap = v[1].buf, *cost = v[2].buf, *rel = v[3].buf, *C = v[4].buf;
    const i64 *s_src = v[5].buf, *s_dst = v[6].buf, *s_lag = v[7].buf;
    const i64 *d_src = v[8].buf, *d_dst = v[9].buf, *d_lag = v[10].buf;
    i64 *end = v[11].buf, *a = v[12].buf, *b = v[13].buf;
    for (k = 0; k < ns; k++)
        if (s_src[k] < 0 || s_src[k] >= n || s_dst[k] < 0 || s_dst[k] >= n) {
            PyErr_SetString(PyExc_IndexError, "edge index out of range");
            goto out;
        }
    for (k = 0; k < nd; k++)
        if (d_src[k] < 0 || d_src[k] >= n || d_dst[k] < 0 || d_dst[k] >= n) {
            PyErr_SetString(PyExc_IndexError, "edge index out of range");
            goto out;
        }
    i64 *nw = malloc(((size_t)n + 1) * sizeof(i64));
    if (!nw) {
        PyErr_NoMemory();
        goto out;
    }
    long long sweeps = 0;
    int converged = 0, swept = 0, failed = 0;
    Py_BEGIN_ALLOW_THREADS
    while (sweeps < max_sweeps) {
        if (sweeps == fast_sweeps) {   /* a long chain of lane changes: one topological pass */
            int ok = topological(n, first, gap, cost, rel, ns, s_src, s_dst, s_lag, nd, d_src,
                                 d_dst, d_lag, (i64)floor_, end);
            if (ok < 0) {
                failed = 1;
                break;
            }
            if (!ok)
                break;
        }
        sweeps++;
        swept = 1;
        memcpy(a, rel, (size_t)n * sizeof(i64));
        for (k = 0; k < ns; k++) {
            i64 t = end[s_src[k]] + s_lag[k];
            if (t > a[s_dst[k]])
                a[s_dst[k]] = t;
        }
        for (i = 0; i < n; i++)
            b[i] = (i64)neg;
        for (k = 0; k < nd; k++) {
            i64 t = end[d_src[k]] + d_lag[k];
            if (t > b[d_dst[k]])
                b[d_dst[k]] = t;
        }
        /* new = C + segmented running max of (max(a + cost, b, floor) - C) */
        int same = 1;
        i64 run_max = 0;
        for (i = 0; i < n; i++) {
            i64 r = a[i] == (i64)neg ? (i64)neg : a[i] + cost[i];
            if (b[i] > r)
                r = b[i];
            if ((i64)floor_ > r)
                r = (i64)floor_;
            i64 x = r - C[i];
            if (first[i] || x > run_max)
                run_max = x;
            nw[i] = C[i] + run_max;
            if (nw[i] != end[i])
                same = 0;
        }
        if (same) {
            converged = 1;
            break;
        }
        memcpy(end, nw, (size_t)n * sizeof(i64));
    }
    Py_END_ALLOW_THREADS
    free(nw);
    if (failed) {
        PyErr_NoMemory();
        goto out;
    }
    res = Py_BuildValue("(Lii)", sweeps, converged, swept);
out:
    for (i = 0; i < got; i++)
        PyBuffer_Release(&v[i]);
    return res;
}

/* parents(ts, end, out): factkit.Stacks._parents's sweep -- out[i] is the index of row i's
 * innermost open enclosing row (-1 at the top); rows sorted by start, longest first. The
 * same stack, the same pops, the same answers. */
static PyObject *parents(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2]))
        return NULL;
    static const char *names[3] = {"ts", "end", "out"};
    Py_buffer v[3];
    int got = 0;
    PyObject *res = NULL;
    for (; got < 3; got++)
        if (get_buf(o[got], &v[got], 8, got == 2, names[got]) < 0)
            goto out;
    Py_ssize_t n = v[0].len / 8, i;
    if (v[1].len / 8 != n || v[2].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "array lengths differ");
        goto out;
    }
    const i64 *ts = v[0].buf, *end = v[1].buf;
    i64 *par = v[2].buf;
    Py_ssize_t *stack = malloc(((size_t)n + 1) * sizeof(Py_ssize_t)), top = 0;
    if (!stack) {
        PyErr_NoMemory();
        goto out;
    }
    for (i = 0; i < n; i++) {
        while (top && end[stack[top - 1]] <= ts[i] && end[stack[top - 1]] > ts[stack[top - 1]])
            top--;
        while (top && end[stack[top - 1]] < ts[i])
            top--;
        par[i] = top ? stack[top - 1] : -1;
        stack[top++] = i;
    }
    free(stack);
    Py_INCREF(Py_None);
    res = Py_None;
out:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    return res;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "The replay's sweeps and topological pass (sim.py)."},
    {"parents", parents, METH_VARARGS, "Innermost enclosing row of each nested row (factkit)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csim",
                                    "Loops in C: the replay's (sim.py), nested rows' parents (factkit.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__csim(void) { return PyModule_Create(&module); }
