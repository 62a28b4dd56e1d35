/* The interval algebra of passes/intervals.py in C: one pass over the intervals where the
 * numpy code makes several (sorts, cumulative maxima, searches, masks, gathers).
 *
 * intervals.py's ``*_py`` functions are the reference; each function here gives the same
 * integers (tests/test_civ.py compares both on real traces' gaps and host rows and on crafted
 * and random cases). A function whose precondition does not hold (a set's ends not sorted)
 * returns None and the caller takes the numpy path. Arrays come in through the buffer
 * protocol (contiguous int64); results go out as bytearrays of int64 (numpy.frombuffer).
 * Arithmetic wraps like numpy's int64 (built with -fwrapv). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;

static int get_i64(PyObject *o, Py_buffer *v, const char *what) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (v->itemsize != 8 || v->format == NULL || (strcmp(v->format, "l") != 0 &&
                                                  strcmp(v->format, "q") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s: an int64 array expected", what);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static Py_ssize_t len_of(Py_buffer *v) { return v->len / 8; }

/* A growing int64 array (doubling), handed out as a bytearray. */
typedef struct {
    i64 *p;
    Py_ssize_t n, cap;
} vec;

static int push(vec *v, i64 x) {
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 1024;
        i64 *p = realloc(v->p, (size_t)cap * sizeof(i64));
        if (!p)
            return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return 0;
}

static PyObject *out_of(const i64 *p, Py_ssize_t n) {
    return PyByteArray_FromStringAndSize((const char *)p, n * (Py_ssize_t)sizeof(i64));
}

/* One interval (or pair) pushed onto two arrays at once. */
static int push2(vec *a, vec *b, i64 x, i64 y) {
    return push(a, x) < 0 || push(b, y) < 0 ? -1 : 0;
}

/* The two arrays as the (bytearray, bytearray) every two-array result returns. */
static PyObject *pair_out(const vec *a, const vec *b) {
    return Py_BuildValue("NN", out_of(a->p, a->n), out_of(b->p, b->n));
}

static int sorted(const i64 *x, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++)
        if (x[i] < x[i - 1])
            return 0;
    return 1;
}

/* The first index in [lo, hi) of sorted x whose x[i] > key (``strict``: >= key). */
static Py_ssize_t bisect(const i64 *x, Py_ssize_t lo, Py_ssize_t hi, i64 key, int strict) {
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (strict ? x[mid] < key : x[mid] <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Number of x[i] <= key (numpy searchsorted side="right") in sorted x. */
static Py_ssize_t upper(const i64 *x, Py_ssize_t n, i64 key) {
    return bisect(x, 0, n, key, 0);
}

/* The same, galloping up from ``hint`` (an answer for a smaller key: x[hint - 1] <= key);
 * a hint that is not one is checked and the search starts over. */
static Py_ssize_t upper_from(const i64 *x, Py_ssize_t n, i64 key, Py_ssize_t hint) {
    Py_ssize_t lo = hint, step = 1, hi;
    if (lo > 0 && x[lo - 1] > key)
        return upper(x, n, key);
    while (lo + step <= n && x[lo + step - 1] <= key) {   /* x[lo..lo+step) all <= key */
        lo += step;
        step *= 2;
    }
    hi = lo + step < n ? lo + step : n;
    return bisect(x, lo, hi, key, 0);
}

/* Number of x[i] < key (side="left") in sorted x, galloping up from ``hint`` as upper_from. */
static Py_ssize_t lower_from(const i64 *x, Py_ssize_t n, i64 key, Py_ssize_t hint) {
    Py_ssize_t lo = hint, step = 1, hi;
    if (lo > 0 && x[lo - 1] >= key)
        lo = 0;
    while (lo + step <= n && x[lo + step - 1] < key) {
        lo += step;
        step *= 2;
    }
    hi = lo + step < n ? lo + step : n;
    return bisect(x, lo, hi, key, 1);
}

/* union(s, e) -> (starts, ends), or None when the non-empty pieces' starts are not sorted
 * (numpy's sort then: it is quicker on runs than a qsort here). Empty pieces (e <= s) are
 * dropped; a piece that starts at or before the reach of those before it joins them
 * (touching pieces merge), as intervals.union_py. */
static PyObject *iv_union(PyObject *self, PyObject *args) {
    PyObject *so, *eo, *res = NULL;
    Py_buffer sb, eb;
    if (!PyArg_ParseTuple(args, "OO", &so, &eo))
        return NULL;
    if (get_i64(so, &sb, "starts") < 0)
        return NULL;
    if (get_i64(eo, &eb, "ends") < 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    const i64 *s = sb.buf, *e = eb.buf;
    Py_ssize_t n = len_of(&sb) < len_of(&eb) ? len_of(&sb) : len_of(&eb), i;
    int have = 0;
    i64 ps = 0, cs = 0, ce = 0;   /* ps: the open piece's start; cs: the last start */
    vec os = {0}, oe = {0};
    for (i = 0; i < n; i++) {
        if (e[i] <= s[i])
            continue;
        if (have && s[i] < cs) {   /* not sorted (cs: the last non-empty start so far) */
            res = Py_None;
            Py_INCREF(res);
            goto done;
        }
        if (have && s[i] <= ce) {
            if (e[i] > ce)
                ce = e[i];
            cs = s[i];
            continue;
        }
        if (have && push2(&os, &oe, ps, ce) < 0)
            goto nomem;
        ps = cs = s[i];
        ce = e[i];
        have = 1;
    }
    if (have && push2(&os, &oe, ps, ce) < 0)
        goto nomem;
    res = pair_out(&os, &oe);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(os.p);
    free(oe.p);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    return res;
}

static int cmp_i64(const void *a, const void *b) {
    i64 x = *(const i64 *)a, y = *(const i64 *)b;
    return (x > y) - (x < y);
}

/* x itself when sorted, else a sorted copy in *own (freed by the caller). */
static const i64 *sorted_view(const i64 *x, Py_ssize_t n, i64 **own) {
    *own = NULL;
    if (sorted(x, n))
        return x;
    *own = malloc((size_t)(n ? n : 1) * sizeof(i64));
    if (!*own)
        return NULL;
    memcpy(*own, x, (size_t)n * sizeof(i64));
    qsort(*own, (size_t)n, sizeof(i64), cmp_i64);
    return *own;
}

/* sweep(a_s, a_e, b_s, b_e, mode) -> (starts, ends): the pieces between consecutive distinct
 * endpoints where a covers (count of a's starts minus ends at or before the piece > 0) and b
 * does (mode 0: intersect) or does not (mode 1: subtract), touching pieces merged, as
 * intervals._sweep_py. The counts depend only on each array's multiset of endpoints, so each
 * is merged in sorted order (a sorted copy where it is not). */
static PyObject *iv_sweep(PyObject *self, PyObject *args) {
    PyObject *o[4], *res = NULL;
    Py_buffer b[4];
    int mode, got = 0, j;
    i64 *own[4] = {NULL, NULL, NULL, NULL};
    const i64 *x[4];
    Py_ssize_t n[4], at[4] = {0, 0, 0, 0};
    vec os = {0}, oe = {0};
    static const char *what[4] = {"a starts", "a ends", "b starts", "b ends"};
    if (!PyArg_ParseTuple(args, "OOOOi", &o[0], &o[1], &o[2], &o[3], &mode))
        return NULL;
    for (got = 0; got < 4; got++)
        if (get_i64(o[got], &b[got], what[got]) < 0)
            goto done;
    for (j = 0; j < 4; j++) {
        n[j] = len_of(&b[j]);
        x[j] = sorted_view(b[j].buf, n[j], &own[j]);
        if (!x[j])
            goto nomem;
    }
    {
        i64 ca = 0, cb = 0, p = 0;
        int have = 0, open = 0;   /* open: a piece [cs, ce) is being extended */
        i64 cs = 0, ce = 0;
        int prev_in = 0;
        i64 prev_p = 0;
        for (;;) {
            int any = 0;
            for (j = 0; j < 4; j++)
                if (at[j] < n[j] && (!any || x[j][at[j]] < p)) {
                    p = x[j][at[j]];
                    any = 1;
                }
            if (!any)
                break;
            /* the piece [prev_p, p) had the state set at prev_p */
            if (have && prev_in) {
                if (open && ce == prev_p)
                    ce = p;
                else {
                    if (open && push2(&os, &oe, cs, ce) < 0)
                        goto nomem;
                    cs = prev_p;
                    ce = p;
                    open = 1;
                }
            }
            while (at[0] < n[0] && x[0][at[0]] == p) { ca++; at[0]++; }
            while (at[1] < n[1] && x[1][at[1]] == p) { ca--; at[1]++; }
            while (at[2] < n[2] && x[2][at[2]] == p) { cb++; at[2]++; }
            while (at[3] < n[3] && x[3][at[3]] == p) { cb--; at[3]++; }
            prev_in = ca > 0 && (mode == 0 ? cb > 0 : !(cb > 0));
            prev_p = p;
            have = 1;
        }
        if (open && push2(&os, &oe, cs, ce) < 0)
            goto nomem;
    }
    res = pair_out(&os, &oe);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    for (j = 0; j < got; j++)
        PyBuffer_Release(&b[j]);
    for (j = 0; j < 4; j++)
        free(own[j]);
    free(os.p);
    free(oe.p);
    return res;
}

/* intersect_sorted(a_s, a_e, b_s, b_e) -> (starts, ends, i): for each b interval in order,
 * the a intervals from the first ending after its start to the last starting before its end,
 * clipped to it (i: the a interval's index), as intervals.intersect_sorted_py; None when a's
 * starts or ends are not sorted (the searches assume both). Two passes (count, then fill the
 * results in place): no temporary of b's size. */
static PyObject *iv_intersect_sorted(PyObject *self, PyObject *args) {
    PyObject *o[4], *res = NULL, *r[3] = {NULL, NULL, NULL};
    Py_buffer b[4];
    int got = 0, j, pass;
    Py_ssize_t na, nb, total = 0, k, w = 0;
    static const char *what[4] = {"a starts", "a ends", "b starts", "b ends"};
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    for (got = 0; got < 4; got++)
        if (get_i64(o[got], &b[got], what[got]) < 0)
            goto done;
    const i64 *as = b[0].buf, *ae = b[1].buf, *bs = b[2].buf, *be = b[3].buf;
    na = len_of(&b[0]) < len_of(&b[1]) ? len_of(&b[0]) : len_of(&b[1]);
    nb = len_of(&b[2]) < len_of(&b[3]) ? len_of(&b[2]) : len_of(&b[3]);
    if (!sorted(as, na) || !sorted(ae, na)) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    for (pass = 0; pass < 2; pass++) {
        i64 *os = NULL, *oe = NULL, *oi = NULL;
        Py_ssize_t lo = 0, hi = 0;
        if (pass == 1) {
            for (j = 0; j < 3; j++)
                if (!(r[j] = PyByteArray_FromStringAndSize(NULL, total * (Py_ssize_t)sizeof(i64))))
                    goto done;
            os = (i64 *)PyByteArray_AS_STRING(r[0]);
            oe = (i64 *)PyByteArray_AS_STRING(r[1]);
            oi = (i64 *)PyByteArray_AS_STRING(r[2]);
        }
        for (k = 0; k < nb; k++) {
            int up = k && bs[k] >= bs[k - 1], up_e = k && be[k] >= be[k - 1];
            lo = upper_from(ae, na, bs[k], up ? lo : 0);
            hi = lower_from(as, na, be[k], up_e ? hi : 0);
            if (pass == 0) {
                total += hi > lo ? hi - lo : 0;
                continue;
            }
            for (Py_ssize_t i = lo; i < hi; i++, w++) {
                os[w] = as[i] > bs[k] ? as[i] : bs[k];
                oe[w] = ae[i] < be[k] ? ae[i] : be[k];
                oi[w] = (i64)i;
            }
        }
    }
    res = Py_BuildValue("OOO", r[0], r[1], r[2]);
done:
    for (j = 0; j < got; j++)
        PyBuffer_Release(&b[j]);
    for (j = 0; j < 3; j++)
        Py_XDECREF(r[j]);
    return res;
}

/* reaching(s, e, qs, qe) -> indices of the queries whose first piece ending after their
 * start (the last piece if none) begins before their end and ends after their start, as
 * intervals._reaching_py; None when e is not sorted. */
static PyObject *iv_reaching(PyObject *self, PyObject *args) {
    PyObject *o[4], *res = NULL;
    Py_buffer b[4];
    int got = 0, j;
    vec out = {0};
    static const char *what[4] = {"starts", "ends", "query starts", "query ends"};
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    for (got = 0; got < 4; got++)
        if (get_i64(o[got], &b[got], what[got]) < 0)
            goto done;
    const i64 *s = b[0].buf, *e = b[1].buf, *qs = b[2].buf, *qe = b[3].buf;
    Py_ssize_t n = len_of(&b[0]) < len_of(&b[1]) ? len_of(&b[0]) : len_of(&b[1]);
    Py_ssize_t m = len_of(&b[2]) < len_of(&b[3]) ? len_of(&b[2]) : len_of(&b[3]), h = 0;
    if (n == 0 || !sorted(e, n)) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        h = upper_from(e, n, qs[i], i && qs[i] >= qs[i - 1] ? h : 0);
        Py_ssize_t k = h < n - 1 ? h : n - 1;
        if (s[k] < qe[i] && qs[i] < e[k] && push(&out, (i64)i) < 0)
            goto nomem;
    }
    res = out_of(out.p, out.n);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    for (j = 0; j < got; j++)
        PyBuffer_Release(&b[j]);
    free(out.p);
    return res;
}

/* overlap_hits(s, e, qs, qe) -> (indices, ns covered) of the queries the disjoint set covers
 * in part, as intervals.overlap_hits_py; None when e is not sorted. */
static PyObject *iv_overlap_hits(PyObject *self, PyObject *args) {
    PyObject *o[4], *res = NULL;
    Py_buffer b[4];
    int got = 0, j;
    vec oi = {0}, ov = {0};
    i64 *prefix = NULL;
    static const char *what[4] = {"starts", "ends", "query starts", "query ends"};
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    for (got = 0; got < 4; got++)
        if (get_i64(o[got], &b[got], what[got]) < 0)
            goto done;
    const i64 *s = b[0].buf, *e = b[1].buf, *qs = b[2].buf, *qe = b[3].buf;
    Py_ssize_t n = len_of(&b[0]) < len_of(&b[1]) ? len_of(&b[0]) : len_of(&b[1]);
    Py_ssize_t m = len_of(&b[2]) < len_of(&b[3]) ? len_of(&b[2]) : len_of(&b[3]), h = 0, h2 = 0;
    if (n == 0 || !sorted(e, n)) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    prefix = malloc(((size_t)n + 1) * sizeof(i64));
    if (!prefix)
        goto nomem;
    prefix[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + (e[i] - s[i]);
    for (Py_ssize_t i = 0; i < m; i++) {
        h = upper_from(e, n, qs[i], i && qs[i] >= qs[i - 1] ? h : 0);
        if (h >= n || !(s[h] < qe[i]))
            continue;
        i64 d = qs[i] - s[h];
        i64 before_a = prefix[h] + (d > 0 ? d : 0);
        h2 = upper_from(e, n, qe[i], h);   /* h is a valid start where qe >= qs */
        i64 before_b = prefix[h2];
        if (h2 < n) {
            i64 d2 = qe[i] - s[h2];
            before_b += d2 > 0 ? d2 : 0;
        }
        i64 cov = before_b - before_a;
        if (cov > 0 && push2(&oi, &ov, (i64)i, cov) < 0)
            goto nomem;
    }
    res = pair_out(&oi, &ov);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    for (j = 0; j < got; j++)
        PyBuffer_Release(&b[j]);
    free(prefix);
    free(oi.p);
    free(ov.p);
    return res;
}

static PyMethodDef methods[] = {
    {"union", iv_union, METH_VARARGS, "Sorted disjoint union (intervals.union)."},
    {"sweep", iv_sweep, METH_VARARGS, "Intersection (0) or difference (1) (intervals._sweep)."},
    {"intersect_sorted", iv_intersect_sorted, METH_VARARGS,
     "Clipped pairs of two disjoint sorted sets (intervals.intersect_sorted)."},
    {"reaching", iv_reaching, METH_VARARGS, "Queries that meet the set (intervals.reaching)."},
    {"overlap_hits", iv_overlap_hits, METH_VARARGS,
     "Queries the set covers in part, and by how much (intervals.overlap_hits)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_civ",
                                    "The interval algebra of passes/intervals.py in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__civ(void) { return PyModule_Create(&module); }
