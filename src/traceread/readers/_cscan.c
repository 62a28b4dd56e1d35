/* Native per-chunk decoder for Chrome-trace (Kineto) JSON events.
 *
 * scan(buf, exact) takes the bytes of one chunk -- "[" event, event, ... "]" --
 * and returns the columns that readers/stream.py builds a Chunk from, equal
 * bit for bit to the msgspec decode + _kineto_decode.events_to_batch path.
 *
 * It returns None ("decode this chunk in Python") for anything outside the
 * common shape: invalid JSON, wrong value types, escaped keys, duplicate
 * keys, very long numbers, non-string names, ... The Python path then gives
 * the result or the exact error message it always gave, so this file only
 * has to be right for the inputs it accepts. Every read is bounds-checked.
 *
 * Layout: this file holds the types, the per-row logic and the module; the
 * lexer (_cscan_json.h), token -> value conversions (_cscan_values.h) and
 * the string interning (_cscan_intern.h) are included below, once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define NS_MISSING INT64_MIN
#define EXACT_US_LIMIT 8796093022208.0     /* 2**43 */
/* |ts| / |dur| at or beyond this many µs go to Python: it refuses values past
 * +-2**62 ns (4.61e15 µs) or, in older code, handles the float64 overflow */
#define US_LIMIT 4.6e15
#define MAX_DEPTH 512

enum { T_MISSING = 0, T_NULL, T_TRUE, T_FALSE, T_INT, T_FLOAT, T_STR, T_OBJ, T_ARR };

typedef struct {
    const unsigned char *s; /* STR: first byte after the quote; other: token start */
    Py_ssize_t len;
    unsigned char type;
    unsigned char esc;      /* STR holds a backslash escape */
    unsigned char has_exp;  /* INT / FLOAT: written with an exponent */
} Tok;

/* event keys */
enum { K_PH, K_NAME, K_CAT, K_PID, K_TID, K_TS, K_DUR, K_ARGS, K_N };
/* args keys (the fields of _kineto_decode.Args). Two shapes of Args exist
 * (see _native.SCANNED): the base one, and "ext", which adds the
 * record_shapes / kernel launch / memory args; in the base shape their keys
 * are unknown keys (skipped). */
enum {
    A_EXT, A_EXT_OLD, A_CORR, A_DEVICE, A_STREAM, A_BYTES, A_SIZE, A_IN, A_OUT, A_GROUP, A_PGID,
    A_FLOPS, A_REGS, A_SHMEM, A_OCC, A_MEM_BYTES, A_MEM_ALLOC, A_MEM_RESV, A_MEM_DEV, /* ext */
    A_FLOPS_CAP, /* ext; Num fields above: all but this one are int columns, in order */
    A_KIND, A_DIRECTION, A_COLL, A_DTYPE, A_PGNAME, A_PGDESC, A_NAME, A_LABELS, /* Any */
    A_IN_DIMS, A_IN_TYPE, A_CONCRETE, A_GRID, A_BLOCK, /* ext, msgspec.Raw: the JSON text */
    A_N
};
#define A_BASE_INTS (A_PGID + 1)
#define A_EXT_INTS (A_MEM_DEV + 1)
#define A_FIRST_ANY A_KIND
#define A_FIRST_RAW A_IN_DIMS
#define IS_EXT_KEY(a) (((a) >= A_FLOPS && (a) <= A_FLOPS_CAP) || (a) >= A_FIRST_RAW)

/* output int64 columns: pid, tid, ts_ns, dur_ns (dense), then ARG_INT_FIELDS in
 * order (kept as (row, value) pairs of the rows where they are not -1) */
enum { C_PID, C_TID, C_TS, C_DUR, C_ARG0 };
#define N_ICOLS C_ARG0
/* sparse string fields, ARG_STR_FIELDS order */
static const int STR_FIELDS[6] = {A_KIND, A_DIRECTION, A_COLL, A_DTYPE, A_PGNAME, A_PGDESC};
#define N_SCOLS 6
/* ext: Raw text fields, shipped dictionary-coded (DENSE_STR_FIELDS order) */
static const int RAW_FIELDS[5] = {A_IN_DIMS, A_IN_TYPE, A_CONCRETE, A_GRID, A_BLOCK};
#define N_RCOLS 5

/* Which Args shape this scan follows (set per call; the GIL is held throughout). */
static int ext_mode;

typedef struct {
    Tok ev[K_N];
    Tok arg[A_N];
    uint64_t ev_set, arg_set; /* bit k: ev[k] / arg[k] holds a token */
} Ev;
typedef char tokens_fit_a_mask[A_N <= 64 && K_N <= 64 ? 1 : -1];

/* --- growable buffers ----------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *d = (char *)PyMem_Realloc(b->data, (size_t)cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static void buf_free(Buf *b)
{
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

#include "_cscan_intern.h"
#include "_cscan_json.h"
#include "_cscan_values.h"

/* --- per-chunk state and row handling ------------------------------------- */

typedef struct {
    P p;
    int exact;
    Py_ssize_t n, cap;
    /* output columns live in the bytearrays returned to Python (no copy at
     * the end: every byte is written once; pages past the rows are never touched) */
    PyObject *iobj[N_ICOLS], *cobj[3];
    int64_t *icol[N_ICOLS];
    /* arg int columns: rows (int32) and values of the entries that are not -1;
     * most rows of most arg columns are -1 (what stream._pack_ints ships) */
    Buf arows[A_EXT_INTS], avals[A_EXT_INTS];
    int32_t *ph, *name, *cat;
    int32_t *pidc, *tidc; /* str code or -1 */
    Interner names, cats, pids, tids;
    int32_t ph_code[128];
    PyObject *ph_uniques;
    PyObject *srows[N_SCOLS], *svals[N_SCOLS];
    /* ext: Raw text columns, as (rows int64, codes int32, dictionary) */
    Buf rrows[N_RCOLS], rcodes[N_RCOLS];
    Interner raws[N_RCOLS];
    PyObject *meta;
    Ev ev; /* the current event's tokens (reused: only the filled ones are reset) */
    int lossy;
    int n_args; /* arg int columns of this shape */
} S;

static int resize_col(PyObject **obj, Py_ssize_t nbytes, void **ptr)
{
    if (!*obj) {
        *obj = PyByteArray_FromStringAndSize(NULL, nbytes);
        if (!*obj)
            return ERR;
    }
    else if (PyByteArray_Resize(*obj, nbytes) < 0)
        return ERR;
    *ptr = PyByteArray_AS_STRING(*obj);
    return OK;
}

static int size_cols(S *st, Py_ssize_t rows)
{
    for (int c = 0; c < N_ICOLS; c++)
        if (resize_col(&st->iobj[c], rows * 8, (void **)&st->icol[c]))
            return ERR;
    int32_t **cc[3] = {&st->ph, &st->name, &st->cat};
    for (int c = 0; c < 3; c++)
        if (resize_col(&st->cobj[c], rows * 4, (void **)cc[c]))
            return ERR;
    return OK;
}

static int grow_rows(S *st, Py_ssize_t want)
{
    if (st->n < st->cap)
        return OK;
    if (st->n >= INT32_MAX)
        return BAD; /* rows are shipped as int32 */
    Py_ssize_t cap = st->cap ? st->cap * 2 : want;
    if (size_cols(st, cap))
        return ERR;
    int32_t **cc[2] = {&st->pidc, &st->tidc};
    for (int c = 0; c < 2; c++) {
        int32_t *a = (int32_t *)PyMem_Realloc(*cc[c], (size_t)cap * sizeof(int32_t));
        if (!a) { PyErr_NoMemory(); return ERR; }
        *cc[c] = a;
    }
    st->cap = cap;
    return OK;
}

/* Python's str.isspace() for ASCII (int() and the \s of _INT_RE). */
static int py_space(unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); }

/* _kineto_decode._INT_RE + _to_int on decoded string bytes: 1 numeric (value in
 * *v, -1 when out of int64), 0 not numeric, BAD when Python's answer depends on
 * more than this string. pid / tid (int_column mixed) only use the regex; arg
 * columns first try np.fromiter, i.e. int(), which also takes "+5", "5_0" and
 * Unicode digits -- those strings go to Python. */
static int numeric_str(const unsigned char *s, Py_ssize_t n, int64_t *v, int arg_column)
{
    int maybe = 0; /* non-ASCII, or '+' / '_' */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x80)
            maybe = 1;
        else if (c == '+' || c == '_') {
            if (!arg_column)
                return 0;
            maybe = 1;
        }
        else if (!(py_space(c) || c == '-' || (c >= '0' && c <= '9')))
            return 0;
    }
    if (maybe)
        return BAD;
    Py_ssize_t i = 0;
    while (i < n && py_space(s[i])) i++;
    int neg = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    Py_ssize_t d0 = i;
    uint64_t acc = 0;
    int over = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (acc > (UINT64_MAX - 9) / 10) over = 1;
        else acc = acc * 10 + (uint64_t)(s[i] - '0');
        i++;
    }
    if (i == d0)
        return 0;
    while (i < n && py_space(s[i])) i++;
    if (i != n)
        return 0;
    if (over || acc > (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX))
        *v = -1;
    else
        *v = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return 1;
}

/* pid / tid of a row: int64 value, and the str code when it is not numeric. */
static int pid_value(S *st, Interner *it, const Tok *t, int64_t *v, int32_t *code)
{
    *code = -1;
    switch (t->type) {
    case T_MISSING:
    case T_NULL: *v = -1; return OK;
    case T_INT: return tok_i64(t, v);
    case T_FLOAT: {
        double d;
        if (tok_double(t, &d) < 0)
            return BAD;
        *v = fabs(d) < 9.2e18 ? (int64_t)d : -1;
        return OK;
    }
    case T_STR: break;
    default: return BAD;
    }
    const unsigned char *s;
    Py_ssize_t n;
    if (str_bytes(&st->p, t, &s, &n) < 0)
        return ERR;
    int is_new;
    int32_t c = intern(it, s, n, &is_new);
    if (c < 0)
        return c == -2 ? BAD : ERR;
    if (is_new) {
        int64_t val = -1;
        int num = numeric_str(s, n, &val, 0);
        if (num < 0)
            return BAD;
        if (buf_reserve(&it->num, 9) < 0)
            return ERR;
        memcpy(it->num.data + it->num.len, &val, 8);
        it->num.data[it->num.len + 8] = (char)num;
        it->num.len += 9;
    }
    const char *rec = it->num.data + (Py_ssize_t)c * 9;
    memcpy(v, rec, 8);
    if (!rec[8])
        *code = c;
    return OK;
}

static int str_code(S *st, Interner *it, const Tok *t, int missing_is_empty, int32_t *code)
{
    if (t->type == T_MISSING && missing_is_empty) {
        int is_new;
        *code = intern(it, (const unsigned char *)"", 0, &is_new);
        return *code < 0 ? ERR : OK;
    }
    if (t->type == T_MISSING || t->type == T_NULL) {
        *code = -1;
        return OK;
    }
    if (t->type != T_STR)
        return BAD; /* a non-string name / cat: Python keeps the objects */
    const unsigned char *s;
    Py_ssize_t n;
    if (str_bytes(&st->p, t, &s, &n) < 0)
        return ERR;
    int is_new;
    int32_t c = intern(it, s, n, &is_new);
    if (c < 0)
        return c == -2 ? BAD : ERR;
    *code = c;
    return OK;
}

static int is_num_type(int type)
{
    return type == T_MISSING || type == T_NULL || type == T_INT || type == T_FLOAT ||
           type == T_STR;
}

/* The type checks msgspec makes on a row / 'M' event; BAD where it would fail. */
static int validate(P *p, Ev *ev)
{
    Tok *e = ev->ev;
    if (!is_num_type(e[K_PID].type) || !is_num_type(e[K_TID].type))
        return BAD;
    for (int k = K_TS; k <= K_DUR; k++)
        if (!(e[k].type == T_MISSING || e[k].type == T_NULL || e[k].type == T_INT ||
              e[k].type == T_FLOAT))
            return BAD;
    if (!(e[K_ARGS].type == T_MISSING || e[K_ARGS].type == T_NULL || e[K_ARGS].type == T_OBJ))
        return BAD;
    /* event-level strings are all materialised (decoding checks them) */
    for (int k = 0; k < K_N; k++) {
        if (k == K_ARGS)
            continue;
        if (e[k].type == T_OBJ || e[k].type == T_ARR || !float_sane(&e[k]))
            return BAD;
    }
    /* only the args present (the others are T_MISSING: nothing to check);
     * Raw fields take any value as it is */
    for (uint64_t m = ev->arg_set & (((uint64_t)1 << A_FIRST_RAW) - 1); m; m &= m - 1) {
        int a = __builtin_ctzll(m);
        Tok *t = &ev->arg[a];
        if (a < A_FIRST_ANY && !is_num_type(t->type))
            return BAD;
        if (t->type == T_OBJ || t->type == T_ARR || !float_sane(t))
            return BAD;
        int rc = str_tok_ok(p, t);
        if (rc)
            return rc;
    }
    return OK;
}

/* An int arg column value as _ints / int_column give it (-1 when unknown). */
static int arg_int(S *st, const Tok *t, int64_t *v)
{
    switch (t->type) {
    case T_MISSING:
    case T_NULL: *v = -1; return OK;
    case T_INT: return tok_i64(t, v);
    case T_FLOAT: {
        double d;
        if (tok_double(t, &d) < 0 || fabs(d) >= 9.2e18)
            return BAD;
        *v = (int64_t)d; /* int(): toward zero */
        return OK;
    }
    case T_STR: {
        const unsigned char *s;
        Py_ssize_t n;
        if (str_bytes(&st->p, t, &s, &n) < 0)
            return ERR;
        int num = numeric_str(s, n, v, 1);
        if (num < 0)
            return BAD;
        if (!num)
            *v = -1;
        return OK;
    }
    default: return BAD;
    }
}

/* Arg int column f of row i: recorded when it is not -1 (rows ascend per column). */
static int put_arg(S *st, int f, Py_ssize_t i, int64_t v)
{
    if (v == -1)
        return OK;
    Buf *r = &st->arows[f], *b = &st->avals[f];
    if (buf_reserve(r, 4) < 0 || buf_reserve(b, 8) < 0)
        return ERR;
    int32_t row = (int32_t)i;
    memcpy(r->data + r->len, &row, 4);
    memcpy(b->data + b->len, &v, 8);
    r->len += 4;
    b->len += 8;
    return OK;
}

/* arg_int of t into arg int column f of row i */
static int arg_put(S *st, int f, Py_ssize_t i, const Tok *t)
{
    if (t->type == T_MISSING || t->type == T_NULL)
        return OK;
    int64_t v;
    int rc = arg_int(st, t, &v);
    return rc ? rc : put_arg(st, f, i, v);
}

static int present(const Tok *t) { return t->type != T_MISSING && t->type != T_NULL; }

static int sparse_str(S *st, int col, Py_ssize_t row, const Tok *t)
{
    if (!present(t))
        return OK;
    int rc;
    PyObject *v = tok_object(&st->p, t, &rc);
    if (!v)
        return rc;
    PyObject *r = PyLong_FromSsize_t(row);
    if (!r || PyList_Append(st->srows[col], r) < 0 || PyList_Append(st->svals[col], v) < 0) {
        Py_XDECREF(r);
        Py_DECREF(v);
        return ERR;
    }
    Py_DECREF(r);
    Py_DECREF(v);
    return OK;
}

/* A Raw field of a sentinel row: its JSON text as written (``str(raw)``),
 * dictionary-coded; absent or ``null``: no entry (None). */
static int raw_str(S *st, int col, Py_ssize_t row, const Tok *t)
{
    if (t->type == T_MISSING || t->type == T_NULL)
        return OK;
    const unsigned char *s = t->s;
    Py_ssize_t n = t->len;
    if (t->type == T_STR) { /* the token, quotes included */
        s -= 1;
        n += 2;
    }
    int is_new;
    int32_t code = intern(&st->raws[col], s, n, &is_new);
    if (code < 0)
        return code == -2 ? BAD : ERR;
    Buf *r = &st->rrows[col], *c = &st->rcodes[col];
    if (buf_reserve(r, 8) < 0 || buf_reserve(c, 4) < 0)
        return ERR;
    int64_t row64 = row;
    memcpy(r->data + r->len, &row64, 8);
    memcpy(c->data + c->len, &code, 4);
    r->len += 8;
    c->len += 4;
    return OK;
}

/* ext: shape args (sentinel "Input Dims"), launch args ("grid"), memory
 * instants ("Bytes"), as _kineto_decode._sparse reads them. */
static int ext_groups(S *st, Tok *a, Py_ssize_t i)
{
    int rc;
    if (a[A_IN_DIMS].type != T_MISSING) { /* a Raw null is present too */
        int64_t flops, cap;
        if ((rc = arg_int(st, &a[A_FLOPS], &flops)) || (rc = arg_int(st, &a[A_FLOPS_CAP], &cap)))
            return rc;
        if ((rc = put_arg(st, A_FLOPS, i, flops >= 0 ? flops : cap)))
            return rc;
        for (int c = 0; c < 3; c++)
            if ((rc = raw_str(st, c, i, &a[RAW_FIELDS[c]])))
                return rc;
    }
    if (a[A_GRID].type != T_MISSING) {
        for (int f = A_REGS; f <= A_OCC; f++)
            if ((rc = arg_put(st, f, i, &a[f])))
                return rc;
        for (int c = 3; c < N_RCOLS; c++)
            if ((rc = raw_str(st, c, i, &a[RAW_FIELDS[c]])))
                return rc;
    }
    if (present(&a[A_MEM_BYTES])) {
        for (int f = A_MEM_BYTES; f <= A_MEM_DEV; f++)
            if ((rc = arg_put(st, f, i, &a[f])))
                return rc;
    }
    return OK;
}

static int add_row(S *st, Ev *ev, int ph)
{
    int rc;
    if ((rc = grow_rows(st, 4096)))
        return rc;
    Py_ssize_t i = st->n;
    Tok *e = ev->ev, *a = ev->arg;
    if (st->ph_code[ph] < 0) {
        char c = (char)ph;
        PyObject *u = PyUnicode_FromStringAndSize(&c, 1);
        if (!u || PyList_Append(st->ph_uniques, u) < 0) {
            Py_XDECREF(u);
            return ERR;
        }
        Py_DECREF(u);
        st->ph_code[ph] = (int32_t)(PyList_GET_SIZE(st->ph_uniques) - 1);
    }
    st->ph[i] = st->ph_code[ph];
    if ((rc = str_code(st, &st->names, &e[K_NAME], 1, &st->name[i])) ||
        (rc = str_code(st, &st->cats, &e[K_CAT], 0, &st->cat[i])) ||
        (rc = pid_value(st, &st->pids, &e[K_PID], &st->icol[C_PID][i], &st->pidc[i])) ||
        (rc = pid_value(st, &st->tids, &e[K_TID], &st->icol[C_TID][i], &st->tidc[i])))
        return rc;
    int64_t *ts = &st->icol[C_TS][i], *dur = &st->icol[C_DUR][i];
    if (!present(&e[K_TS]))
        *ts = NS_MISSING;
    else if ((rc = st->exact ? us_exact(&e[K_TS], ts) : us_float_path(&e[K_TS], ts, &st->lossy)))
        return rc;
    int ignored = 0;
    if (e[K_DUR].type == T_MISSING)
        *dur = 0;              /* the struct default, 0.0 */
    else if (e[K_DUR].type == T_NULL)
        *dur = NS_MISSING;     /* np.fromiter makes None a NaN */
    else if ((rc = us_float_path(&e[K_DUR], dur, &ignored)))
        return rc;
    for (int f = A_EXT; f <= A_STREAM; f++)
        if ((rc = arg_put(st, f, i, &a[f])))
            return rc;
    if (present(&a[A_BYTES]) || present(&a[A_SIZE])) {
        if ((rc = arg_put(st, A_BYTES, i, &a[A_BYTES])) ||
            (rc = arg_put(st, A_SIZE, i, &a[A_SIZE])) ||
            (rc = sparse_str(st, 0, i, &a[A_KIND])) ||
            (rc = sparse_str(st, 1, i, &a[A_DIRECTION])))
            return rc;
    }
    if (present(&a[A_COLL])) {
        for (int f = A_IN; f <= A_PGID; f++)
            if ((rc = arg_put(st, f, i, &a[f])))
                return rc;
        for (int c = 2; c < N_SCOLS; c++)
            if ((rc = sparse_str(st, c, i, &a[STR_FIELDS[c]])))
                return rc;
    }
    if (ext_mode && (rc = ext_groups(st, a, i)))
        return rc;
    st->n++;
    return OK;
}

/* 'M' event -> (name, pid, tid, args.name, args.labels), as msgspec gives them. */
static int add_meta(S *st, Ev *ev)
{
    Tok *e = ev->ev;
    PyObject *o[5] = {NULL, NULL, NULL, NULL, NULL};
    int rc = OK;
    if (e[K_NAME].type == T_MISSING)
        o[0] = PyUnicode_FromStringAndSize("", 0);
    else
        o[0] = tok_object(&st->p, &e[K_NAME], &rc);
    for (int k = 0; k < 2 && !rc; k++) {
        Tok *t = &e[k == 0 ? K_PID : K_TID];
        o[1 + k] = t->type == T_MISSING ? PyLong_FromLong(-1) : tok_object(&st->p, t, &rc);
    }
    for (int k = 0; k < 2 && !rc; k++) {
        Tok *t = &ev->arg[k == 0 ? A_NAME : A_LABELS];
        if (t->type == T_MISSING) {
            Py_INCREF(Py_None);
            o[3 + k] = Py_None;
        }
        else
            o[3 + k] = tok_object(&st->p, t, &rc);
    }
    PyObject *tup = NULL;
    if (!rc) {
        for (int k = 0; k < 5; k++)
            if (!o[k])
                rc = ERR;
    }
    if (!rc) {
        tup = PyTuple_Pack(5, o[0], o[1], o[2], o[3], o[4]);
        if (!tup || PyList_Append(st->meta, tup) < 0)
            rc = ERR;
    }
    Py_XDECREF(tup);
    for (int k = 0; k < 5; k++)
        Py_XDECREF(o[k]);
    return rc;
}

static const char ROW_PHASES[] = "XiIBE";
static const char SKIP_PHASES[] = "CbneSTpFstfPNODVvRc()";
static unsigned char PHASE[256]; /* 1: a row phase, 2: a skipped one */

static int one_event(S *st)
{
    Ev *ev = &st->ev;
    for (uint64_t m = ev->ev_set; m; m &= m - 1)
        ev->ev[__builtin_ctzll(m)].type = T_MISSING;
    for (uint64_t m = ev->arg_set; m; m &= m - 1)
        ev->arg[__builtin_ctzll(m)].type = T_MISSING;
    ev->ev_set = ev->arg_set = 0;
    P *p = &st->p;
    if (peek(p) != '{')
        return BAD; /* not an object: msgspec's ValidationError */
    if (scan_object(p, ev->ev, event_key, K_ARGS, ev->arg, &ev->ev_set, &ev->arg_set) < 0)
        return BAD;
    Tok *ph = &ev->ev[K_PH];
    if (ph->type != T_STR || ph->esc || ph->len != 1)
        return BAD;
    int c = ph->s[0];
    if (c == 'M' || PHASE[c] == 1) {
        int rc = validate(p, ev);
        if (rc)
            return rc;
        return c == 'M' ? add_meta(st, ev) : add_row(st, ev, c);
    }
    if (PHASE[c] == 2)
        return OK;
    return BAD;
}

/* The events of "[" ... "]"; bare: the text between the brackets only. */
static int scan_all(S *st, int bare)
{
    P *p = &st->p;
    skip_ws(p);
    if (!bare) {
        if (peek(p) != '[')
            return BAD;
        p->p++;
        skip_ws(p);
    }
    int close = bare ? -1 : ']'; /* bare: the events end where the buffer does */
    if (peek(p) == close) {
        if (!bare)
            p->p++;
    }
    else {
        for (;;) {
            int rc = one_event(st);
            if (rc)
                return rc;
            skip_ws(p);
            int c = peek(p);
            if (c == ',') {
                p->p++;
                skip_ws(p);
                continue;
            }
            if (c == close) {
                if (!bare)
                    p->p++;
                break;
            }
            return BAD;
        }
    }
    skip_ws(p);
    return p->p == p->end ? OK : BAD;
}

/* --- results ---------------------------------------------------------------- */

/* {row: str} of the non-numeric string pids / tids, in the order the Python
 * path's dict has (unique by unique in first-appearance order, rows ascending). */
static PyObject *str_dict(S *st, const int32_t *codes, Interner *it)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(it->uniques);
    if (k == 0)
        return d;
    Py_ssize_t *start = (Py_ssize_t *)PyMem_Calloc((size_t)k + 1, sizeof(Py_ssize_t));
    Py_ssize_t *rows = (Py_ssize_t *)PyMem_Malloc((size_t)(st->n ? st->n : 1) * sizeof(Py_ssize_t));
    if (!start || !rows) {
        PyMem_Free(start);
        PyMem_Free(rows);
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < st->n; i++)
        if (codes[i] >= 0)
            start[codes[i] + 1]++;
    for (Py_ssize_t c = 0; c < k; c++)
        start[c + 1] += start[c];
    for (Py_ssize_t i = 0; i < st->n; i++)
        if (codes[i] >= 0)
            rows[start[codes[i]]++] = i;
    Py_ssize_t pos = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *u = PyList_GET_ITEM(it->uniques, c);
        for (; pos < start[c]; pos++) {
            PyObject *key = PyLong_FromSsize_t(rows[pos]);
            if (!key || PyDict_SetItem(d, key, u) < 0) {
                Py_XDECREF(key);
                Py_CLEAR(d);
                goto done;
            }
            Py_DECREF(key);
        }
    }
done:
    PyMem_Free(start);
    PyMem_Free(rows);
    return d;
}

/* An int column as stream._pack_ints ships it: (int32 rows, int64 values) of
 * the entries that are not -1 when they are at most a third of the rows, else
 * the dense int64 column (bytearrays). From the pairs (cnt of them): */
static PyObject *int_column(Py_ssize_t n, const char *rows, const char *vals, Py_ssize_t cnt)
{
    if (cnt * 3 <= n)
        return Py_BuildValue("NN", PyByteArray_FromStringAndSize(rows, cnt * 4),
                             PyByteArray_FromStringAndSize(vals, cnt * 8));
    PyObject *o = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (!o)
        return NULL;
    int64_t *d = (int64_t *)PyByteArray_AS_STRING(o);
    memset(d, 0xFF, (size_t)n * 8); /* -1 */
    for (Py_ssize_t k = 0; k < cnt; k++) {
        int32_t r;
        memcpy(&r, rows + k * 4, 4);
        memcpy(&d[r], vals + k * 8, 8);
    }
    return o;
}

/* ... and from a dense column (pid, tid, ts, dur): itself unless mostly -1 */
static PyObject *dense_column(S *st, int c)
{
    const int64_t *a = st->icol[c];
    Py_ssize_t n = st->n, cnt = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        cnt += a[i] != -1;
    if (cnt * 3 > n) {
        Py_INCREF(st->iobj[c]);
        return st->iobj[c];
    }
    Buf r = {0}, v = {0};
    PyObject *o = NULL;
    if (buf_reserve(&r, cnt * 4 + 1) == 0 && buf_reserve(&v, cnt * 8 + 1) == 0) {
        for (Py_ssize_t i = 0; i < n; i++)
            if (a[i] != -1) {
                int32_t row = (int32_t)i;
                memcpy(r.data + r.len, &row, 4);
                memcpy(v.data + v.len, &a[i], 8);
                r.len += 4;
                v.len += 8;
            }
        o = int_column(n, r.data, v.data, cnt);
    }
    buf_free(&r);
    buf_free(&v);
    return o;
}

static PyObject *build_result(S *st)
{
    if (size_cols(st, st->n))
        return NULL;
    PyObject *ints = PyList_New(N_ICOLS + st->n_args);
    if (!ints)
        return NULL;
    for (int c = 0; c < N_ICOLS + st->n_args; c++) {
        PyObject *o = c < N_ICOLS ? dense_column(st, c)
                                  : int_column(st->n, st->arows[c - N_ICOLS].data,
                                               st->avals[c - N_ICOLS].data,
                                               st->arows[c - N_ICOLS].len / 4);
        if (!o) {
            Py_DECREF(ints);
            return NULL;
        }
        PyList_SET_ITEM(ints, c, o);
    }
    int n_rcols = ext_mode ? N_RCOLS : 0;
    PyObject *sparse = PyList_New(N_SCOLS + n_rcols);
    if (!sparse) {
        Py_DECREF(ints);
        return NULL;
    }
    for (int c = 0; c < N_SCOLS; c++)
        PyList_SET_ITEM(sparse, c, PyTuple_Pack(2, st->srows[c], st->svals[c]));
    for (int c = 0; c < n_rcols; c++)
        PyList_SET_ITEM(sparse, N_SCOLS + c,
                        Py_BuildValue("NNO", PyByteArray_FromStringAndSize(st->rrows[c].data,
                                                                           st->rrows[c].len),
                                      PyByteArray_FromStringAndSize(st->rcodes[c].data,
                                                                    st->rcodes[c].len),
                                      st->raws[c].uniques));
    PyObject *pid_str = str_dict(st, st->pidc, &st->pids);
    PyObject *tid_str = pid_str ? str_dict(st, st->tidc, &st->tids) : NULL;
    PyObject *r = NULL;
    if (pid_str && tid_str)
        r = Py_BuildValue("nOOOOOOOOOOOO", st->n, st->cobj[0], st->ph_uniques,
                          st->cobj[1], st->names.uniques, st->cobj[2], st->cats.uniques,
                          ints, sparse, pid_str, tid_str,
                          st->lossy ? Py_True : Py_False, st->meta);
    Py_XDECREF(pid_str);
    Py_XDECREF(tid_str);
    Py_DECREF(ints);
    Py_DECREF(sparse);
    return r;
}

static void state_free(S *st)
{
    for (int c = 0; c < N_ICOLS; c++)
        Py_XDECREF(st->iobj[c]);
    for (int c = 0; c < 3; c++)
        Py_XDECREF(st->cobj[c]);
    PyMem_Free(st->pidc);
    PyMem_Free(st->tidc);
    for (int f = 0; f < A_EXT_INTS; f++) {
        buf_free(&st->arows[f]);
        buf_free(&st->avals[f]);
    }
    intern_free(&st->names);
    intern_free(&st->cats);
    intern_free(&st->pids);
    intern_free(&st->tids);
    Py_XDECREF(st->ph_uniques);
    for (int c = 0; c < N_SCOLS; c++) {
        Py_XDECREF(st->srows[c]);
        Py_XDECREF(st->svals[c]);
    }
    for (int c = 0; c < N_RCOLS; c++) {
        buf_free(&st->rrows[c]);
        buf_free(&st->rcodes[c]);
        intern_free(&st->raws[c]);
    }
    Py_XDECREF(st->meta);
    buf_free(&st->p.scratch);
}

static Py_ssize_t last_decline = -1; /* byte offset of the last declined chunk's stop */

static PyObject *declined_at(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromSsize_t(last_decline);
}

PyDoc_STRVAR(scan_doc,
"scan(buf, exact=False, bare=False, ext=False) -> tuple | None\n\n"
"Decode one chunk ('[' events ']'; bare: the events without the brackets)\n"
"into column data; None when the chunk needs the Python decoder (odd types,\n"
"invalid JSON, ...). ext: the Args shape with shape / launch / memory args.");

static PyObject *scan(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    int exact = 0, bare = 0, ext = 0;
    if (!PyArg_ParseTuple(args, "y*|ppp", &view, &exact, &bare, &ext))
        return NULL;
    S st;
    memset(&st, 0, sizeof(st));
    st.exact = exact;
    ext_mode = ext;
    st.n_args = ext ? A_EXT_INTS : A_BASE_INTS;
    st.p.p = (const unsigned char *)view.buf;
    st.p.end = st.p.p + view.len;
    refill(&st.p, st.p.p);
    for (int c = 0; c < 128; c++)
        st.ph_code[c] = -1;
    PyObject *result = NULL;
    int rc = ERR;
    if (intern_init(&st.names) == 0 && intern_init(&st.cats) == 0 &&
        intern_init(&st.pids) == 0 && intern_init(&st.tids) == 0 &&
        (st.ph_uniques = PyList_New(0)) && (st.meta = PyList_New(0))) {
        rc = OK;
        for (int c = 0; c < N_SCOLS && rc == OK; c++) {
            st.srows[c] = PyList_New(0);
            st.svals[c] = PyList_New(0);
            if (!st.srows[c] || !st.svals[c])
                rc = ERR;
        }
        for (int c = 0; c < N_RCOLS && rc == OK && ext; c++)
            if (intern_init(&st.raws[c]) < 0)
                rc = ERR;
    }
    /* rows are >= ~150 bytes of JSON: this is one allocation per chunk; the
     * pages of an over-estimate are never touched */
    if (rc == OK)
        rc = grow_rows(&st, 1024 + view.len / 128);
    if (rc == OK)
        rc = scan_all(&st, bare);
    if (rc == OK)
        result = build_result(&st);
    else if (rc == BAD) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
            PyErr_Clear();
        if (!PyErr_Occurred()) {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    last_decline = rc == BAD ? (Py_ssize_t)(st.p.p - (const unsigned char *)view.buf) : -1;
    state_free(&st);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"declined_at", declined_at, METH_NOARGS,
     "Byte offset where the last declined chunk stopped (debugging aid); -1 if none."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cscan",
    "Native Chrome-trace chunk decoder (see readers/_cscan.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__cscan(void)
{
    for (int c = 0; c < 256; c++) {
        WS[c] = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        STR_STOP[c] = c == '"' || c == '\\' || c < 0x20;
    }
    for (const char *c = ROW_PHASES; *c; c++)
        PHASE[(unsigned char)*c] = 1;
    for (const char *c = SKIP_PHASES; *c; c++)
        PHASE[(unsigned char)*c] = 2;
    return PyModule_Create(&module);
}
