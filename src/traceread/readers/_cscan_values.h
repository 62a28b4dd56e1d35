/* Token values: decoded string bytes, UTF-8 checks, numbers -> int64 ns / double / Python objects.
 * Part of _cscan.c (included once, from there; not a public header). */
#ifndef _CSCAN_VALUES_H
#define _CSCAN_VALUES_H

/* --- strings and numbers out of tokens ------------------------------------ */

static int put_utf8(Buf *b, unsigned cp)
{
    if (buf_reserve(b, 4) < 0)
        return ERR;
    unsigned char *o = (unsigned char *)b->data + b->len;
    if (cp < 0x80) { o[0] = (unsigned char)cp; b->len += 1; }
    else if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        b->len += 2;
    }
    else if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        b->len += 3;
    }
    else {
        o[0] = (unsigned char)(0xF0 | (cp >> 18));
        o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (unsigned char)(0x80 | (cp & 0x3F));
        b->len += 4;
    }
    return OK;
}

/* Decoded bytes of a STR token (escapes resolved into p->scratch when present).
 * The token was validated by scan_string. */
static int str_bytes(P *p, const Tok *t, const unsigned char **out, Py_ssize_t *n)
{
    if (!t->esc) {
        *out = t->s;
        *n = t->len;
        return OK;
    }
    Buf *b = &p->scratch;
    b->len = 0;
    const unsigned char *s = t->s, *e = t->s + t->len;
    while (s < e) {
        if (*s != '\\') {
            const unsigned char *r = s;
            while (r < e && *r != '\\')
                r++;
            if (buf_reserve(b, r - s) < 0)
                return ERR;
            memcpy(b->data + b->len, s, (size_t)(r - s));
            b->len += r - s;
            s = r;
            continue;
        }
        unsigned char c = s[1];
        unsigned cp = 0;
        switch (c) {
        case 'b': cp = '\b'; s += 2; break;
        case 'f': cp = '\f'; s += 2; break;
        case 'n': cp = '\n'; s += 2; break;
        case 'r': cp = '\r'; s += 2; break;
        case 't': cp = '\t'; s += 2; break;
        case 'u': {
            read_u4(s + 2, e, &cp);
            s += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo = 0;
                read_u4(s + 2, e, &lo);
                s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            break;
        }
        default: cp = c; s += 2; break; /* '"' '\\' '/' */
        }
        if (put_utf8(b, cp) < 0)
            return ERR;
    }
    *out = (const unsigned char *)b->data;
    *n = b->len;
    return OK;
}

/* Strict UTF-8 check (what Python's decoder accepts). */
static int utf8_ok(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return 0;
        if (i + k >= n) return 0;
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* Known STR slot that is not materialised: msgspec still builds a str from it,
 * so bytes Python would reject must send the chunk to Python. */
static int str_tok_ok(P *p, const Tok *t)
{
    if (t->type != T_STR)
        return OK;
    const unsigned char *s;
    Py_ssize_t n;
    if (str_bytes(p, t, &s, &n) < 0)
        return ERR;
    return utf8_ok(s, n) ? OK : BAD;
}

/* Float tokens msgspec might reject as out of range (or that are absurdly long). */
static int float_sane(const Tok *t)
{
    if (t->type != T_FLOAT)
        return 1;
    if (t->len > 64)
        return 0;
    if (!t->has_exp) /* set by scan_number: no loop over the digits for the common case */
        return 1;
    for (Py_ssize_t i = 0; i < t->len; i++) {
        unsigned char c = t->s[i];
        if (c == 'e' || c == 'E') {
            const unsigned char *e = t->s + i + 1, *end = t->s + t->len;
            if (e < end && (*e == '+' || *e == '-'))
                e++;
            while (e < end && *e == '0')
                e++;
            return end - e <= 2; /* |exponent| < 100 */
        }
    }
    return 1;
}

static int tok_double(const Tok *t, double *out)
{
    char tmp[80];
    if (t->len >= (Py_ssize_t)sizeof(tmp))
        return BAD;
    memcpy(tmp, t->s, (size_t)t->len);
    tmp[t->len] = 0;
    char *endp = NULL;
    double d = PyOS_string_to_double(tmp, &endp, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return BAD;
    }
    if (endp != tmp + t->len || !isfinite(d))
        return BAD;
    *out = d;
    return OK;
}

/* INT token -> int64, at most 18 digits (longer: Python). */
static int tok_i64(const Tok *t, int64_t *out)
{
    const unsigned char *s = t->s, *e = t->s + t->len;
    int neg = 0;
    if (s < e && *s == '-') { neg = 1; s++; }
    if (e - s > 18 || e == s)
        return BAD;
    int64_t v = 0;
    for (; s < e; s++)
        v = v * 10 + (*s - '0');
    *out = neg ? -v : v;
    return OK;
}

/* Decimal parts of a number token: digits (leading zeros dropped), exponent. */
typedef struct {
    int neg;
    uint64_t mant;
    int ndig;     /* significant digits in mant */
    int exp10;    /* value = mant * 10**exp10 */
    int nfrac;    /* digits written after the point */
    int has_exp;
} Dec;

static int tok_dec(const Tok *t, Dec *d)
{
    const unsigned char *s = t->s, *e = t->s + t->len;
    memset(d, 0, sizeof(*d));
    if (s < e && *s == '-') { d->neg = 1; s++; }
    int frac = 0;
    for (; s < e; s++) {
        unsigned char c = *s;
        if (c == '.') { frac = 1; continue; }
        if (c == 'e' || c == 'E') break;
        if (frac) { d->nfrac++; d->exp10--; }
        if (d->ndig == 0 && c == '0')
            continue;
        if (d->ndig >= 19)
            return BAD;
        d->mant = d->mant * 10 + (uint64_t)(c - '0');
        d->ndig++;
    }
    if (s < e) {
        d->has_exp = 1;
        s++;
        int eneg = 0;
        if (*s == '+' || *s == '-') { eneg = *s == '-'; s++; }
        int ev = 0;
        for (; s < e; s++) {
            if (ev > 100000)
                return BAD;
            ev = ev * 10 + (*s - '0');
        }
        d->exp10 += eneg ? -ev : ev;
    }
    return OK;
}

/* What numpy does in _kineto_decode.us_to_ns for one float64. */
static int64_t double_us_to_ns(double us)
{
    double ip = floor(us);
    double frac = us - ip;
    return (int64_t)ip * 1000 + (int64_t)rint(frac * 1000.0);
}

/* A number token [-]digits[.digits] with at most 18 digits and 3 decimals,
 * no exponent (every Kineto ts / dur): 1 with the value of its digits and
 * its decimals -- what tok_dec gives for it, in one simple loop. 0: other. */
static inline int short_dec(const Tok *t, uint64_t *m, int *neg, int *nfrac)
{
    const unsigned char *s = t->s, *e = t->s + t->len;
    *neg = s < e && *s == '-';
    s += *neg;
    uint64_t v = 0;
    int nd = 0, nf = -1;
    for (; s < e; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (d < 10) {
            v = v * 10 + d;
            nd++;
            nf += nf >= 0;
        }
        else if (*s == '.' && nf < 0)
            nf = 0;
        else
            return 0; /* an exponent */
    }
    if (nd > 18 || nf > 3)
        return 0;
    *m = v;
    *nfrac = nf < 0 ? 0 : nf;
    return 1;
}

/* ts / dur number token -> ns as the float path computes it; *lossy as
 * events_to_batch flags it (float token at or above 2**43 µs). */
static int us_float_path(const Tok *t, int64_t *ns, int *lossy)
{
    Dec d;
    uint64_t mant;
    int neg, nfrac;
    int simple = short_dec(t, &mant, &neg, &nfrac);
    if (!simple && tok_dec(t, &d) == OK && !d.has_exp && d.ndig <= 18 && d.nfrac <= 3) {
        simple = 1;
        mant = d.mant;
        neg = d.neg;
        nfrac = d.nfrac;
    }
    if (simple) {
        /* The exact value, where the float64 path of us_to_ns gives the same
         * ns: ints below US_LIMIT (< 2**53: float(v) is exact), floats with <= 3 decimals
         * below 2**43 µs (ulp < 1 ns, see _kineto_decode.EXACT_US_LIMIT). */
        const uint64_t limit_ns = 8796093022208ULL * 1000;
        uint64_t m = mant, v = 0;
        int ok = 0;
        if (t->type == T_INT) {
            ok = m < 4600000000000000ULL; /* US_LIMIT */
            v = m * 1000;
        }
        else {
            uint64_t scale = nfrac == 0 ? 1000 : nfrac == 1 ? 100 : nfrac == 2 ? 10 : 1;
            if (m <= limit_ns / scale) {
                v = m * scale;
                ok = v < limit_ns;
            }
        }
        if (ok) {
            *ns = neg ? -(int64_t)v : (int64_t)v;
            return OK;
        }
    }
    double us;
    if (tok_double(t, &us) < 0 || fabs(us) >= US_LIMIT)
        return BAD;
    if (t->type == T_FLOAT && fabs(us) >= EXACT_US_LIMIT)
        *lossy = 1;
    *ns = double_us_to_ns(us);
    return OK;
}

/* ts token -> ns exactly, round half to even (exact_us_to_ns on the Decimal). */
static int us_exact(const Tok *t, int64_t *ns)
{
    Dec d;
    if (tok_dec(t, &d) < 0)
        return BAD;
    int s = d.exp10 + 3;
    __int128 v = (__int128)d.mant;
    if (d.mant == 0) {
        *ns = 0;
        return OK;
    }
    if (s >= 0) {
        if (s > 19)
            return BAD;
        for (int i = 0; i < s; i++)
            v *= 10;
    }
    else {
        if (-s > 38) {
            *ns = 0; /* mant < 10**19: below half a ns */
            return OK;
        }
        __int128 q = 1;
        for (int i = 0; i < -s; i++)
            q *= 10;
        __int128 r = v % q, half = q / 2;
        v = v / q;
        if (r > half || (r == half && (v & 1)))
            v += 1;
    }
    if (v >= (__int128)(US_LIMIT * 1000))
        return BAD;
    *ns = d.neg ? -(int64_t)v : (int64_t)v;
    return OK;
}

/* A scalar token as the Python object msgspec gives for an Any / Num field. */
static PyObject *tok_object(P *p, const Tok *t, int *rc)
{
    *rc = OK;
    switch (t->type) {
    case T_NULL: Py_RETURN_NONE;
    case T_TRUE: Py_RETURN_TRUE;
    case T_FALSE: Py_RETURN_FALSE;
    case T_INT: {
        char tmp[80];
        if (t->len >= (Py_ssize_t)sizeof(tmp)) {
            *rc = BAD;
            return NULL;
        }
        memcpy(tmp, t->s, (size_t)t->len);
        tmp[t->len] = 0;
        PyObject *o = PyLong_FromString(tmp, NULL, 10);
        if (!o)
            *rc = ERR;
        return o;
    }
    case T_FLOAT: {
        double d;
        if (!float_sane(t) || tok_double(t, &d) < 0) {
            *rc = BAD;
            return NULL;
        }
        PyObject *o = PyFloat_FromDouble(d);
        if (!o)
            *rc = ERR;
        return o;
    }
    case T_STR: {
        const unsigned char *s;
        Py_ssize_t n;
        if (str_bytes(p, t, &s, &n) < 0) {
            *rc = ERR;
            return NULL;
        }
        PyObject *o = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
        if (!o) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                *rc = BAD;
            }
            else
                *rc = ERR;
        }
        return o;
    }
    default:
        *rc = BAD; /* containers: Python builds those */
        return NULL;
    }
}

#endif
