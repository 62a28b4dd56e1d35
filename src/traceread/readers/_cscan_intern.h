/* String interning: decoded bytes -> per-chunk dictionary code.
 * Part of _cscan.c (included once, from there; not a public header). */
#ifndef _CSCAN_INTERN_H
#define _CSCAN_INTERN_H

/* --- interning: decoded string bytes -> code (first-appearance order) ------- */

typedef struct {
    uint64_t hash;
    Py_ssize_t off, len; /* into arena */
    int32_t code;
} Slot;

typedef struct {
    Slot *slots;
    Py_ssize_t mask, used;
    Buf arena;
    PyObject *uniques; /* list of str */
    Buf num;           /* per code, for pid/tid: int64 value, then flag byte (numeric) */
} Interner;

static uint64_t hash_bytes(const unsigned char *s, Py_ssize_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, (size_t)n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h;
}

static int intern_init(Interner *t)
{
    memset(t, 0, sizeof(*t));
    t->mask = 1023;
    t->slots = (Slot *)PyMem_Calloc((size_t)t->mask + 1, sizeof(Slot));
    t->uniques = PyList_New(0);
    if (!t->slots || !t->uniques) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void intern_free(Interner *t)
{
    PyMem_Free(t->slots);
    t->slots = NULL;
    buf_free(&t->arena);
    buf_free(&t->num);
    Py_CLEAR(t->uniques);
}

static int intern_grow(Interner *t)
{
    Py_ssize_t ncap = (t->mask + 1) * 2;
    Slot *ns = (Slot *)PyMem_Calloc((size_t)ncap, sizeof(Slot));
    if (!ns) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i <= t->mask; i++) {
        Slot *s = &t->slots[i];
        if (s->code == 0)
            continue;
        Py_ssize_t j = (Py_ssize_t)(s->hash & (uint64_t)(ncap - 1));
        while (ns[j].code != 0)
            j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    PyMem_Free(t->slots);
    t->slots = ns;
    t->mask = ncap - 1;
    return 0;
}

/* a[0..n) == b[0..n): names are mostly 8-32 bytes, compared inline in words */
static inline int same_bytes(const char *a, const unsigned char *b, Py_ssize_t n)
{
    uint64_t x, y;
    while (n >= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
        a += 8;
        b += 8;
        n -= 8;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned char)a[i] != b[i])
            return 0;
    return 1;
}

/* Slot.code holds code + 1 (0 = empty). Returns the code, -1 on a Python error,
 * -2 when the bytes are not valid UTF-8 (hand the chunk to Python). */
static int32_t intern(Interner *t, const unsigned char *s, Py_ssize_t n, int *is_new)
{
    uint64_t h = hash_bytes(s, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)t->mask);
    *is_new = 0;
    while (t->slots[j].code != 0) {
        Slot *sl = &t->slots[j];
        if (sl->hash == h && sl->len == n &&
            same_bytes(t->arena.data + sl->off, s, n))
            return sl->code - 1;
        j = (j + 1) & t->mask;
    }
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (!u) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return -2;
        }
        return -1;
    }
    int rc = PyList_Append(t->uniques, u);
    Py_DECREF(u);
    if (rc < 0 || buf_reserve(&t->arena, n) < 0)
        return -1;
    if (n) /* the arena is still NULL when "" comes first */
        memcpy(t->arena.data + t->arena.len, s, (size_t)n);
    int32_t code = (int32_t)(PyList_GET_SIZE(t->uniques) - 1);
    Slot *sl = &t->slots[j];
    sl->hash = h;
    sl->off = t->arena.len;
    sl->len = n;
    sl->code = code + 1;
    t->arena.len += n;
    *is_new = 1;
    if (++t->used * 2 > t->mask && intern_grow(t) < 0)
        return -1;
    return code;
}

#endif
