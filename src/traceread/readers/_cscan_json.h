/* JSON lexing: whitespace, strings, numbers, literals, skipped values, objects.
 * Part of _cscan.c (included once, from there; not a public header). */
#ifndef _CSCAN_JSON_H
#define _CSCAN_JSON_H

/* --- the scanner ---------------------------------------------------------- */

/* The cursor, and bit masks of the 64 bytes from `base` (bit i: base[i]):
 * whitespace, string stops ('"', '\\', control chars) and quotes. Gaps and
 * strings are then skipped with a shift and a count of trailing zeros of a
 * register -- no load of the bytes and no compare on the critical path from
 * one token to the next, which is what bounds a token-at-a-time scanner. */
/* The keys of the last object read at one level (events, args), in order:
 * events of one kind repeat their keys, so the next object's i-th key is
 * first compared with the last one's (its bytes, still in the buffer, were
 * validated then) -- a compare in place of a string scan and a lookup. */
#define MEMO_N 24
typedef struct {
    const unsigned char *s[MEMO_N];
    Py_ssize_t len[MEMO_N];
    int id[MEMO_N];
} Memo;

typedef struct {
    const unsigned char *p, *end;
    const unsigned char *base;
    uint64_t ws, stop, quote; /* past `end`: not whitespace, a stop, not a quote */
    Buf scratch; /* decoded escaped strings */
    Memo memo[2]; /* 0: event keys, 1: args keys */
} P;

/* The per-token scanners are forced inline: ~10% of the scan time was calls. */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

/* Result codes of the scanning functions. */
#define OK 0
#define BAD (-1)  /* hand the chunk to Python */
#define ERR (-2)  /* Python exception set (memory) */

static unsigned char WS[256];
static unsigned char STR_STOP[256]; /* '"', '\\', control chars */

#ifndef __SSE2__
static uint64_t bits_of(const unsigned char *s, int (*test)(unsigned char))
{
    uint64_t m = 0;
    for (int i = 0; i < 64; i++)
        m |= (uint64_t)(test(s[i]) != 0) << i;
    return m;
}

static int is_ws(unsigned char c) { return WS[c]; }
static int is_stop(unsigned char c) { return STR_STOP[c]; }
static int is_quote(unsigned char c) { return c == '"'; }
#endif

/* Masks of the 64 bytes from `at` (a NUL-padded copy near the end: NUL is a
 * stop and not whitespace, so nothing runs past `end`). */
static void refill(P *p, const unsigned char *at)
{
    unsigned char tmp[64];
    const unsigned char *s = at;
    if (p->end - at < 64) {
        memset(tmp, 0, sizeof(tmp));
        if (p->end > at)
            memcpy(tmp, at, (size_t)(p->end - at));
        s = tmp;
    }
    p->base = at;
#ifdef __SSE2__
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r'), tab = _mm_set1_epi8('\t');
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    const __m128i ctl = _mm_set1_epi8(0x20), flip = _mm_set1_epi8((char)0x80);
    uint64_t ws = 0, stop = 0, q = 0;
    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + 16 * k));
        __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, tab)));
        __m128i qv = _mm_cmpeq_epi8(v, quote);
        /* unsigned c < 0x20 via a signed compare after flipping the top bit */
        __m128i lo = _mm_cmpgt_epi8(_mm_xor_si128(ctl, flip), _mm_xor_si128(v, flip));
        __m128i st = _mm_or_si128(_mm_or_si128(qv, _mm_cmpeq_epi8(v, bslash)), lo);
        ws |= (uint64_t)(unsigned)_mm_movemask_epi8(w) << (16 * k);
        q |= (uint64_t)(unsigned)_mm_movemask_epi8(qv) << (16 * k);
        stop |= (uint64_t)(unsigned)_mm_movemask_epi8(st) << (16 * k);
    }
    p->ws = ws;
    p->stop = stop;
    p->quote = q;
#else
    p->ws = bits_of(s, is_ws);
    p->stop = bits_of(s, is_stop);
    p->quote = bits_of(s, is_quote);
#endif
}

/* Window offset of q (refilled at q when q is past the window). */
static inline unsigned window(P *p, const unsigned char *q)
{
    size_t off = (size_t)(q - p->base);
    if (off >= 64) {
        refill(p, q);
        off = 0;
    }
    return (unsigned)off;
}

static inline void skip_ws(P *p)
{
    if (p->p < p->end && !WS[*p->p])
        return; /* no gap (a value's ',', '}'): no mask work */
    for (;;) {
        unsigned off = window(p, p->p);
        uint64_t m = ~p->ws >> off;
        if (m) {
            p->p += __builtin_ctzll(m);
            return;
        }
        p->p = p->base + 64; /* all whitespace: on with the next window */
    }
}

static inline int peek(P *p) { return p->p < p->end ? *p->p : -1; }

/* After a key: the ':' and the whitespace around it. `"key": value` and
 * `"key":value` (Kineto's and the compact layout) are read with two byte
 * compares instead of two mask skips; anything else takes the general path. */
HOT int skip_colon(P *p)
{
    const unsigned char *q = p->p;
    if (p->end - q > 2 && q[0] == ':') {
        if (!WS[q[1]]) {
            p->p = q + 1;
            return OK;
        }
        if (q[1] == ' ' && !WS[q[2]]) {
            p->p = q + 2;
            return OK;
        }
    }
    skip_ws(p);
    if (peek(p) != ':')
        return BAD;
    p->p++;
    skip_ws(p);
    return OK;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(const unsigned char *s, const unsigned char *end, unsigned *out)
{
    if (end - s < 4)
        return BAD;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s[i]);
        if (h < 0)
            return BAD;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return OK;
}

/* p at '"'. Validates escapes (surrogates must pair) and control chars. */
HOT int scan_string(P *p, Tok *t)
{
    const unsigned char *s = ++p->p, *end = p->end;
    int esc = 0;
    for (;;) {
        unsigned off = window(p, s);
        uint64_t m = p->stop >> off;
        if (!m) {
            s = p->base + 64; /* no stop in the rest of the window */
            continue;
        }
        unsigned k = (unsigned)__builtin_ctzll(m);
        s += k;
        if (s >= end)
            return BAD;
        if ((p->quote >> (off + k)) & 1)
            break;
        if (*s != '\\')
            return BAD; /* raw control character */
        esc = 1;
        if (s + 1 >= end)
            return BAD;
        unsigned char c = s[1];
        if (c == 'u') {
            unsigned u;
            if (read_u4(s + 2, end, &u) < 0)
                return BAD;
            s += 6;
            if (u >= 0xDC00 && u <= 0xDFFF)
                return BAD;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo;
                if (end - s < 6 || s[0] != '\\' || s[1] != 'u' || read_u4(s + 2, end, &lo) < 0
                    || lo < 0xDC00 || lo > 0xDFFF)
                    return BAD;
                s += 6;
            }
        }
        else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                 c == 'r' || c == 't')
            s += 2;
        else
            return BAD;
    }
    if (t) {
        t->type = T_STR;
        t->s = p->p;
        t->len = s - p->p;
        t->esc = (unsigned char)esc;
    }
    p->p = s + 1;
    return OK;
}

/* The run of ASCII digits from s: eight bytes per step where eight are left
 * (byte b is a digit iff its high nibble is 3 before and after adding 6; a
 * carry out of a byte >= 0xFA only reaches later bytes, past the first
 * non-digit that the lowest set bit finds), one at a time near the end. */
HOT const unsigned char *skip_digits(const unsigned char *s, const unsigned char *end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t hi = 0xF0F0F0F0F0F0F0F0ULL, three = 0x3030303030303030ULL;
    while (end - s >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        uint64_t other = ((w & hi) ^ three) | (((w + 0x0606060606060606ULL) & hi) ^ three);
        if (other)
            return s + (__builtin_ctzll(other) >> 3);
        s += 8;
    }
#endif
    while (s < end && *s >= '0' && *s <= '9')
        s++;
    return s;
}

/* p at '-' or a digit: JSON number grammar, strict. */
HOT int scan_number(P *p, Tok *t)
{
    const unsigned char *s = p->p, *end = p->end;
    int is_float = 0, has_exp = 0;
    if (s < end && *s == '-')
        s++;
    if (s >= end)
        return BAD;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        s = skip_digits(s + 1, end);
    else
        return BAD;
    if (s < end && *s == '.') {
        is_float = 1;
        s++;
        if (s >= end || !(*s >= '0' && *s <= '9'))
            return BAD;
        s = skip_digits(s + 1, end);
    }
    if (s < end && (*s == 'e' || *s == 'E')) {
        is_float = has_exp = 1;
        s++;
        if (s < end && (*s == '+' || *s == '-'))
            s++;
        if (s >= end || !(*s >= '0' && *s <= '9'))
            return BAD;
        while (s < end && *s >= '0' && *s <= '9')
            s++;
    }
    if (t) {
        t->type = is_float ? T_FLOAT : T_INT;
        t->s = p->p;
        t->len = s - p->p;
        t->esc = 0;
        t->has_exp = (unsigned char)has_exp;
    }
    p->p = s;
    return OK;
}

static int scan_literal(P *p, const char *lit, Py_ssize_t n)
{
    if (p->end - p->p < n || memcmp(p->p, lit, (size_t)n) != 0)
        return BAD;
    p->p += n;
    return OK;
}

/* A scalar value into t (NULL: just validate). Containers: BAD (caller skips them). */
HOT int scan_scalar(P *p, Tok *t)
{
    int c = peek(p);
    const unsigned char *s0 = p->p;
    int type;
    switch (c) {
    case '"':
        return scan_string(p, t);
    case 't': type = T_TRUE; if (scan_literal(p, "true", 4)) return BAD; break;
    case 'f': type = T_FALSE; if (scan_literal(p, "false", 5)) return BAD; break;
    case 'n': type = T_NULL; if (scan_literal(p, "null", 4)) return BAD; break;
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return scan_number(p, t);
        return BAD;
    }
    if (t) {
        t->type = (unsigned char)type;
        t->s = s0;
        t->len = p->p - s0;
        t->esc = 0;
    }
    return OK;
}

/* Skip any JSON value (validated), iteratively: no recursion on deep nesting. */
static int skip_value(P *p)
{
    unsigned char stack[MAX_DEPTH]; /* '{' or '[' */
    int depth = 0;
    int c;
value:
    c = peek(p);
    if (c == '{' || c == '[') {
        if (depth >= MAX_DEPTH)
            return BAD;
        stack[depth++] = (unsigned char)c;
        p->p++;
        skip_ws(p);
        if (peek(p) == (c == '{' ? '}' : ']')) {
            p->p++;
            depth--;
            goto after;
        }
        if (c == '{')
            goto key;
        goto value;
    }
    if (scan_scalar(p, NULL) < 0)
        return BAD;
after:
    if (depth == 0)
        return OK;
    skip_ws(p);
    c = peek(p);
    if (c == ',') {
        p->p++;
        skip_ws(p);
        if (stack[depth - 1] == '{')
            goto key;
        goto value;
    }
    if (c == (stack[depth - 1] == '{' ? '}' : ']')) {
        p->p++;
        depth--;
        goto after;
    }
    return BAD;
key:
    if (peek(p) != '"' || scan_string(p, NULL) < 0 || skip_colon(p) < 0)
        return BAD;
    goto value;
}

/* A value for a known key: scalars are recorded, containers skipped and typed. */
static int scan_known(P *p, Tok *t)
{
    int c = peek(p);
    if (c == '{' || c == '[') {
        t->type = c == '{' ? T_OBJ : T_ARR;
        t->s = p->p;
        t->esc = 0;
        if (skip_value(p) < 0)
            return BAD;
        t->len = p->p - t->s;
        return OK;
    }
    return scan_scalar(p, t);
}

#define KEY(lit) (n == (Py_ssize_t)sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)

HOT int event_key(const unsigned char *k, Py_ssize_t n)
{
    switch (n) {
    case 2:
        if (KEY("ph")) return K_PH;
        if (KEY("ts")) return K_TS;
        break;
    case 3:
        if (KEY("cat")) return K_CAT;
        if (KEY("pid")) return K_PID;
        if (KEY("tid")) return K_TID;
        if (KEY("dur")) return K_DUR;
        break;
    case 4:
        if (KEY("name")) return K_NAME;
        if (KEY("args")) return K_ARGS;
        break;
    }
    return -1;
}

static int arg_key_any(const unsigned char *k, Py_ssize_t n)
{
    switch (n) {
    case 4:
        if (KEY("size")) return A_SIZE;
        if (KEY("kind")) return A_KIND;
        if (KEY("name")) return A_NAME;
        if (KEY("grid")) return A_GRID;
        break;
    case 5:
        if (KEY("bytes")) return A_BYTES;
        if (KEY("dtype")) return A_DTYPE;
        if (KEY("flops")) return A_FLOPS;
        if (KEY("Flops")) return A_FLOPS_CAP;
        if (KEY("block")) return A_BLOCK;
        if (KEY("Bytes")) return A_MEM_BYTES;
        break;
    case 6:
        if (KEY("device")) return A_DEVICE;
        if (KEY("stream")) return A_STREAM;
        if (KEY("labels")) return A_LABELS;
        break;
    case 9:
        if (KEY("direction")) return A_DIRECTION;
        if (KEY("Device Id")) return A_MEM_DEV;
        break;
    case 10:
        if (KEY("Group size")) return A_GROUP;
        if (KEY("Input Dims")) return A_IN_DIMS;
        if (KEY("Input type")) return A_IN_TYPE;
        break;
    case 11:
        if (KEY("External id")) return A_EXT;
        if (KEY("external id")) return A_EXT_OLD;
        if (KEY("correlation")) return A_CORR;
        break;
    case 13:
        if (KEY("In msg nelems")) return A_IN;
        if (KEY("shared memory")) return A_SHMEM;
        break;
    case 14:
        if (KEY("Out msg nelems")) return A_OUT;
        if (KEY("Total Reserved")) return A_MEM_RESV;
        break;
    case 15:
        if (KEY("Collective name")) return A_COLL;
        if (KEY("Concrete Inputs")) return A_CONCRETE;
        if (KEY("Total Allocated")) return A_MEM_ALLOC;
        break;
    case 16:
        if (KEY("Process Group ID")) return A_PGID;
        break;
    case 18:
        if (KEY("Process Group Name")) return A_PGNAME;
        break;
    case 20:
        if (KEY("registers per thread")) return A_REGS;
        break;
    case 25:
        if (KEY("Process Group Description")) return A_PGDESC;
        if (KEY("est. achieved occupancy %")) return A_OCC;
        break;
    }
    return -1;
}

HOT int arg_key(const unsigned char *k, Py_ssize_t n)
{
    int a = arg_key_any(k, n);
    return a >= 0 && !ext_mode && IS_EXT_KEY(a) ? -1 : a;
}

/* Object members: known keys (by lookup) into toks, others skipped. p at '{'.
 * Escaped or duplicate known keys: BAD. For the event level, an "args" object
 * is parsed into argtoks. Bit k of *set (*argset): toks[k] (argtoks[k]) was
 * filled -- the caller clears just those for the next event. */
static int scan_object(P *p, Tok *toks, int (*lookup)(const unsigned char *, Py_ssize_t),
                       int args_key, Tok *argtoks, uint64_t *set, uint64_t *argset)
{
    Memo *memo = &p->memo[args_key < 0];
    p->p++;
    skip_ws(p);
    if (peek(p) == '}') {
        p->p++;
        return OK;
    }
    for (int i = 0;; i++) {
        int k;
        const unsigned char *q = p->p;
        Py_ssize_t n = i < MEMO_N ? memo->len[i] : -1;
        if (n >= 0 && memo->s[i] && p->end - q > n + 1 && q[0] == '"' && q[n + 1] == '"' &&
            same_bytes((const char *)memo->s[i], q + 1, n)) {
            k = memo->id[i]; /* the same key as the last object's i-th */
            p->p = q + n + 2;
        }
        else {
            Tok key;
            if (peek(p) != '"' || scan_string(p, &key) < 0 || key.esc)
                return BAD;
            k = lookup(key.s, key.len);
            if (i < MEMO_N) {
                memo->s[i] = key.s;
                memo->len[i] = key.len;
                memo->id[i] = k;
            }
        }
        if (skip_colon(p) < 0)
            return BAD;
        if (k < 0) {
            if (skip_value(p) < 0)
                return BAD;
        }
        else if (toks[k].type != T_MISSING)
            return BAD;
        else if ((*set |= (uint64_t)1 << k), k == args_key && peek(p) == '{') {
            toks[k].type = T_OBJ;
            toks[k].s = p->p;
            toks[k].esc = 0;
            if (scan_object(p, argtoks, arg_key, -1, NULL, argset, NULL) < 0)
                return BAD;
            toks[k].len = p->p - toks[k].s;
        }
        else if (scan_known(p, &toks[k]) < 0)
            return BAD;
        skip_ws(p);
        int c = peek(p);
        if (c == ',') {
            p->p++;
            skip_ws(p);
            continue;
        }
        if (c == '}') {
            p->p++;
            return OK;
        }
        return BAD;
    }
}

#endif
