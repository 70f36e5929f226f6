/* The trace reader's columns of GPU events (cgtool.artifacts.trace.decode): scan() reads them straight from
 * a chunk's JSON text; gpu_columns() makes them in one pass over a chunk msgspec decoded (below).
 *
 * Why C: the reader decodes a chunk of chrome-trace events with msgspec into small structs, then
 * turns the GPU events among them into numpy columns. In Python that is one C-level pass per field
 * (``np.fromiter(map(attrgetter(...)))``: about 15 passes a chunk), which cost more than msgspec's
 * decoding (benchmarks/bench_deps.py's profile; docs/performance.md#hand-written-code). Here every
 * field is read straight from the struct's slot
 * (msgspec structs keep their fields in member slots, whose descriptors the caller passes), once,
 * in one loop. The module is optional: without it (no C compiler at install) the Python passes run,
 * and tests/test_trace_stream.py checks that both give the same columns.
 *
 * gpu_columns(evs, fields, arg_fields, arg_defaults, codes, names)
 *   evs          list of event structs, all of one class (the reader's _EventT or a subclass)
 *   fields       member descriptors (ph, cat, name, ts, dur, args) of that class
 *   arg_fields   member descriptors (stream, correlation, device, graph_id, graph_node_id, channel,
 *                channel_type) of the args struct (_Args or a subclass)
 *   arg_defaults the same seven values for an event without args
 *   codes        dict: category -> 0, 1, 2 (GPU kinds), 3 (runtime); any other category is 4
 *   names        dict: kernel name -> index; names not in it are added (index = its length)
 * -> (code: bytes of int8, one per event;
 *     launches: list of the positions of runtime events whose ph is "X" and whose name starts with
 *               "cudaGraphLaunch";
 *     gi: bytes of int64, the positions of the GPU events whose ph is "X";
 *     ts, dur: bytes of float64; stream, corr, device, gid, nid, chan: bytes of int64;
 *     ctype: bytes of int64, or None when a channel type is not an int;
 *     name: bytes of int32 (indices into names))
 *  or None when an event or its args is not what the fields describe (the caller's Python passes
 *  then handle the chunk).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define NF 6 /* ph, cat, name, ts, dur, args */
#define NA 7 /* stream, correlation, device, graph_id, graph_node_id, channel, channel_type */

static int members(PyObject *seq, Py_ssize_t want, PyMemberDef **out) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != want) {
        PyErr_Format(PyExc_TypeError, "expected a tuple of %zd member descriptors", want);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        PyObject *d = PyTuple_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "field %zd is not a member descriptor", i);
            return -1;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX && m->type != T_OBJECT) {
            PyErr_Format(PyExc_TypeError, "field %zd is not an object slot", i);
            return -1;
        }
        out[i] = m;
    }
    return 0;
}

static inline PyObject *slot(PyObject *o, PyMemberDef *m) { /* borrowed; NULL when unset */
    return *(PyObject **)((char *)o + m->offset);
}

static inline int as_i64(PyObject *v, int64_t *out) {
    if (!PyLong_Check(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return -1; }
    *out = (int64_t)x;
    return 0;
}

static inline int as_f64(PyObject *v, double *out) {
    if (PyFloat_CheckExact(v)) { *out = PyFloat_AS_DOUBLE(v); return 0; }
    if (!PyFloat_Check(v)) return -1;
    *out = PyFloat_AsDouble(v);
    return 0;
}

static int is_x(PyObject *ph) {
    return PyUnicode_Check(ph) && PyUnicode_GET_LENGTH(ph) == 1 && PyUnicode_READ_CHAR(ph, 0) == 'X';
}

static int is_graph_launch(PyObject *name) {
    static const char want[] = "cudaGraphLaunch";
    Py_ssize_t k = (Py_ssize_t)(sizeof want - 1);
    if (!PyUnicode_Check(name) || PyUnicode_GET_LENGTH(name) < k) return 0;
    for (Py_ssize_t i = 0; i < k; i++)
        if (PyUnicode_READ_CHAR(name, i) != (Py_UCS4)want[i]) return 0;
    return 1;
}

static PyObject *new_bytes(Py_ssize_t n, char **at) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    *at = b ? PyBytes_AS_STRING(b) : NULL;
    return b;
}

/* Two passes, so that nothing is allocated but the results, at their final sizes (temporary
 * buffers sized for the whole chunk raised the reader's peak memory: the allocator keeps freed
 * blocks of that size). The first pass sets each event's code and counts the
 * GPU events; the second reads their fields. */
static PyObject *gpu_columns(PyObject *mod, PyObject *args) {
    PyObject *evs, *fields, *afields, *adef, *codes, *names;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!OOO!O!O!", &PyList_Type, &evs, &fields, &afields, &PyTuple_Type, &adef,
                          &PyDict_Type, &codes, &PyDict_Type, &names))
        return NULL;
    PyMemberDef *f[NF], *a[NA];
    if (members(fields, NF, f) < 0 || members(afields, NA, a) < 0) return NULL;
    if (PyTuple_GET_SIZE(adef) != NA) return PyErr_Format(PyExc_TypeError, "arg_defaults: %d values", NA);
    int64_t def[NA];
    for (int j = 0; j < NA; j++)
        if (as_i64(PyTuple_GET_ITEM(adef, j), &def[j]) < 0) return PyErr_Format(PyExc_TypeError, "arg_defaults: ints");

    Py_ssize_t n = PyList_GET_SIZE(evs), m = 0;
    PyTypeObject *cls = n ? Py_TYPE(PyList_GET_ITEM(evs, 0)) : NULL, *acls = NULL;
    PyObject *code_b = NULL, *launches = NULL, *gi_b = NULL, *ts_b = NULL, *dur_b = NULL, *name_b = NULL;
    PyObject *cols[NA] = {NULL}, *result = NULL;
    char *code_p, *p;
    int ctype_ints = 1;
    code_b = new_bytes(n, &code_p);
    launches = PyList_New(0);
    if (!code_b || !launches) goto error;
    int8_t *code = (int8_t *)code_p;
    for (Py_ssize_t i = 0; i < n; i++) { /* pass 1: codes, launches, the number of GPU events */
        PyObject *ev = PyList_GET_ITEM(evs, i);
        if (Py_TYPE(ev) != cls) goto fallback;
        PyObject *cat = slot(ev, f[1]);
        if (!cat) goto fallback;
        PyObject *c = PyDict_GetItemWithError(codes, cat); /* borrowed */
        if (!c && PyErr_Occurred()) goto error;
        long k = c ? PyLong_AsLong(c) : 4;
        if (k == -1 && PyErr_Occurred()) goto error;
        if (k < 0 || k > 4) k = 4;
        code[i] = (int8_t)k;
        if (k > 3) continue;
        PyObject *ph = slot(ev, f[0]), *nm = slot(ev, f[2]);
        if (!ph || !nm) goto fallback;
        if (k == 3) {
            if (is_x(ph) && is_graph_launch(nm)) {
                PyObject *pos = PyLong_FromSsize_t(i);
                if (!pos || PyList_Append(launches, pos) < 0) { Py_XDECREF(pos); goto error; }
                Py_DECREF(pos);
            }
        } else if (is_x(ph)) {
            m++;
        } else {
            code[i] = -1; /* instant or begin/end events of GPU categories: not GPU work (set back below) */
        }
    }
    int64_t *gi, *col[NA];
    double *ts, *dur;
    int32_t *name;
    if (!(gi_b = new_bytes(m * 8, &p))) goto error;
    gi = (int64_t *)p;
    if (!(ts_b = new_bytes(m * 8, &p))) goto error;
    ts = (double *)p;
    if (!(dur_b = new_bytes(m * 8, &p))) goto error;
    dur = (double *)p;
    if (!(name_b = new_bytes(m * 4, &p))) goto error;
    name = (int32_t *)p;
    for (int j = 0; j < NA; j++) {
        if (!(cols[j] = new_bytes(m * 8, &p))) goto error;
        col[j] = (int64_t *)p;
    }
    Py_ssize_t g = 0;
    for (Py_ssize_t i = 0; i < n && g < m; i++) { /* pass 2: the GPU events' fields */
        if (code[i] < 0 || code[i] > 2) continue;
        PyObject *ev = PyList_GET_ITEM(evs, i);
        PyObject *t = slot(ev, f[3]), *d = slot(ev, f[4]), *ar = slot(ev, f[5]), *nm = slot(ev, f[2]);
        if (!t || !d || !ar || as_f64(t, &ts[g]) < 0 || as_f64(d, &dur[g]) < 0) goto fallback;
        if (ar == Py_None) {
            for (int j = 0; j < NA; j++) col[j][g] = def[j];
        } else {
            if (!acls) acls = Py_TYPE(ar);
            if (Py_TYPE(ar) != acls) goto fallback;
            for (int j = 0; j < NA; j++) {
                PyObject *v = slot(ar, a[j]);
                if (!v) goto fallback;
                if (as_i64(v, &col[j][g]) < 0) {
                    if (j == NA - 1 && PyUnicode_Check(v)) { ctype_ints = 0; col[j][g] = -1; continue; }
                    goto fallback;
                }
            }
        }
        PyObject *idx = PyDict_GetItemWithError(names, nm); /* borrowed */
        if (!idx) {
            if (PyErr_Occurred()) goto error;
            idx = PyLong_FromSsize_t(PyDict_GET_SIZE(names));
            if (!idx || PyDict_SetItem(names, nm, idx) < 0) { Py_XDECREF(idx); goto error; }
            Py_DECREF(idx);
        }
        long ni = PyLong_AsLong(idx);
        if (ni == -1 && PyErr_Occurred()) goto error;
        name[g] = (int32_t)ni;
        gi[g] = (int64_t)i;
        g++;
    }
    for (Py_ssize_t i = 0; i < n; i++) /* the GPU events of other phases: their category's code again */
        if (code[i] == -1) {
            PyObject *c = PyDict_GetItemWithError(codes, slot(PyList_GET_ITEM(evs, i), f[1]));
            if (!c) goto error;
            code[i] = (int8_t)PyLong_AsLong(c);
        }
    if (!ctype_ints) { Py_DECREF(cols[NA - 1]); Py_INCREF(Py_None); cols[NA - 1] = Py_None; }
    result = PyTuple_Pack(13, code_b, launches, gi_b, ts_b, dur_b, cols[0], cols[1], cols[2], cols[3], cols[4],
                          cols[5], cols[6], name_b);
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
    goto done;
error:
    result = NULL;
done:
    Py_XDECREF(code_b); Py_XDECREF(launches); Py_XDECREF(gi_b); Py_XDECREF(ts_b); Py_XDECREF(dur_b);
    Py_XDECREF(name_b);
    for (int j = 0; j < NA; j++) Py_XDECREF(cols[j]);
    return result;
}

/* ------------------------------------------------------------------------------------------------
 * scan(buf, start, end, codes, names, ct_names, max_graph_id): the GPU events' columns of a run of
 * events read straight from the JSON text, without msgspec's objects.
 *
 * Why: after gpu_columns above, msgspec's decoding of the chunk into structs was the reader's
 * largest cost (docs/performance.md#hand-written-code): it builds a struct, four strings, two
 * floats and an args struct per
 * event, of which only a few fields are kept. Here the text is parsed once and only those fields
 * are converted (benchmarks/bench_deps.py measures it against the msgspec path,
 * CGTOOL_TRACE_SCAN=0).
 *
 * The contract: scan accepts a subset of what the msgspec path accepts and gives exactly its
 * columns for it; anything else gives None and the caller decodes the run with msgspec, which then
 * gives the answer or the error (so every error message and every cut decision of the streaming
 * reader stays msgspec's). The run buf[start:end] must be JSON objects separated by commas (the
 * inside of an array); None for anything that is not strict RFC 8259 JSON, for invalid UTF-8 in
 * any string, a \u escape of a surrogate, nesting deeper than MAX_DEPTH, an escape in a string whose
 * value is used, a field used twice in one object, a used field of another type or out of its
 * bounds (for the events whose args the msgspec path decodes: GPU categories and runtime graph
 * launches), a number that does not convert exactly. tests/test_trace_scan.py checks the two paths
 * against each other on every recording here and on random documents.
 *
 * -> (n events, gi, kind, ts, dur, stream, corr, device, gid, nid, chan, ctype, name, shape, smem,
 *     nbytes, launch_pos, launch_corr, launch_ts, n_other, first_other, launch_dur), the columns as bytes: one row per
 *     GPU event of phase "X" (kind int8, name int32, ts/dur/launch_ts/launch_dur float64 (a launch without "dur": NaN),
 *     the rest int64); shape/smem/nbytes
 *     are kept only for events without a node id (else 0, -1, -1, as the msgspec path); channel
 *     types given as names are 1000 + their index in ct_names (appended as met); launches are the
 *     runtime events of phase "X" named cudaGraphLaunch* whose args hold a correlation id; n_other
 *     and first_other count the events of GPU categories of another phase (not GPU work; -1: none),
 *     and an event of a GPU category without a phase gives None (the msgspec path refuses it).
 *  Names new to `names` (and ct_names) are added; on None they are taken out again. */

typedef const unsigned char *P;
#define MAX_DEPTH 64
#define IS_WS(c) ((c) == ' ' || (c) == '\n' || (c) == '\r' || (c) == '\t')

static unsigned char plain_char[256]; /* 1: a string byte needing no attention (printable ASCII but " and \) */

static inline P skip_ws(P p, P e) {
    while (p < e && IS_WS(*p)) p++;
    return p;
}

static inline int hexval(unsigned c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    return -1;
}

/* Length of the UTF-8 sequence at p (strict: no overlong forms, no surrogates, <= U+10FFFF), or -1. */
static inline int utf8_len(P p, P e) {
    unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return (p + 1 < e && (p[1] & 0xC0) == 0x80) ? 2 : -1;
    if (c >= 0xE0 && c <= 0xEF) {
        if (p + 2 >= e || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return -1;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return -1;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (p + 3 >= e || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return -1;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return -1;
        return 4;
    }
    return -1;
}

/* The string whose opening quote is at p: its raw contents in [*s, *s + *n), *esc set when it holds
 * an escape. Returns the byte after the closing quote, or NULL. */
static P jstring(P p, P e, P *s, Py_ssize_t *n, int *esc) {
    p++;
    *s = p;
    *esc = 0;
    for (;;) {
        /* eight bytes at a time while none is a quote, a backslash, a control byte or non-ASCII */
        while (e - p >= 8) {
            uint64_t v;
            memcpy(&v, p, 8);
#define HASZERO(x) (((x) - 0x0101010101010101ULL) & ~(x) & 0x8080808080808080ULL)
            uint64_t q = v ^ 0x2222222222222222ULL, bs = v ^ 0x5C5C5C5C5C5C5C5CULL;
            if ((v & 0x8080808080808080ULL) | HASZERO(q) | HASZERO(bs) | ((v - 0x2020202020202020ULL) & ~v & 0x8080808080808080ULL))
                break;
#undef HASZERO
            p += 8;
        }
        while (p < e && plain_char[*p]) p++;
        if (p >= e) return NULL;
        unsigned c = *p;
        if (c == '"') {
            *n = p - *s;
            return p + 1;
        }
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= e) return NULL;
            c = p[1];
            if (c == 'u') {
                if (p + 6 > e) return NULL;
                unsigned v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[k]);
                    if (h < 0) return NULL;
                    v = v * 16 + (unsigned)h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return NULL;
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                p += 2;
            } else {
                return NULL;
            }
        } else if (c < 0x20) {
            return NULL;
        } else {
            int k = utf8_len(p, e);
            if (k < 0) return NULL;
            p += k;
        }
    }
}

typedef struct {
    int isint, big, neg;
    uint64_t m;   /* the significant digits (while they fit) */
    int exp10;    /* value = m * 10^exp10, when !big */
    P s;          /* the number's text */
    Py_ssize_t n;
} Num;

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number at p (strict grammar). Returns the byte after it, or NULL. Up to 19 significant
 * digits are kept exactly in m (19 nines fit in 64 bits); more set big. */
static P jnumber(P p, P e, Num *x) {
    x->s = p;
    x->isint = 1;
    x->big = 0;
    x->neg = 0;
    x->exp10 = 0;
    uint64_t m = 0;
    int nd = 0; /* digits taken into m */
    if (p < e && *p == '-') {
        x->neg = 1;
        p++;
    }
    if (p >= e) return NULL;
    if (*p == '0') {
        p++;
    } else if ((unsigned)(*p - '1') < 9) {
        P d = p;
        while (p < e && (unsigned)(*p - '0') < 10) p++;
        nd = (int)(p - d);
        if (nd > 19) x->big = 1;
        else
            for (; d < p; d++) m = m * 10 + (unsigned)(*d - '0');
    } else {
        return NULL;
    }
    if (p < e && *p == '.') {
        x->isint = 0;
        P d = ++p;
        while (p < e && (unsigned)(*p - '0') < 10) p++;
        if (p == d) return NULL;
        int nf = (int)(p - d);
        if (x->big || nd + nf > 19) {
            x->big = 1;
        } else {
            for (; d < p; d++) m = m * 10 + (unsigned)(*d - '0');
            x->exp10 = -nf;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        x->isint = 0;
        p++;
        int sign = 1;
        if (p < e && (*p == '+' || *p == '-')) {
            if (*p == '-') sign = -1;
            p++;
        }
        if (p >= e || (unsigned)(*p - '0') >= 10) return NULL;
        long v = 0;
        while (p < e && (unsigned)(*p - '0') < 10) {
            if (v < 100000) v = v * 10 + (*p - '0');
            p++;
        }
        if (v >= 100000) x->big = 1;
        else x->exp10 += (int)(sign * v);
    }
    x->m = m;
    x->n = p - x->s;
    return p;
}

/* The number as a double, exactly as a correctly rounded parser gives it; -1 when it does not
 * convert to a finite one. Small mantissas times exact powers of ten are one correctly rounded
 * operation (Clinger's fast path); the rest goes through CPython's correctly rounded dtoa. */
static int num_f64(const Num *x, double *out) {
    if (!x->big && x->m <= (1ULL << 53) && x->exp10 >= -22 && x->exp10 <= 22) {
        double d = (double)x->m;
        d = x->exp10 < 0 ? d / pow10_exact[-x->exp10] : d * pow10_exact[x->exp10];
        *out = x->neg ? -d : d;
        return 0;
    }
    char tmp[80];
    if (x->n >= (Py_ssize_t)sizeof tmp) return -1;
    memcpy(tmp, x->s, (size_t)x->n);
    tmp[x->n] = 0;
    char *end = NULL;
    double d = PyOS_string_to_double(tmp, &end, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (end != tmp + x->n || !isfinite(d)) return -1;
    *out = d;
    return 0;
}

/* The number as an int64 within [lo, hi]; -1 when it is not an integer there. */
static int num_i64(const Num *x, int64_t lo, int64_t hi, int64_t *out) {
    if (!x->isint || x->big) return -1;
    int64_t v;
    if (x->neg) {
        if (x->m > (uint64_t)INT64_MAX + 1) return -1;
        v = x->m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x->m;
    } else {
        if (x->m > (uint64_t)INT64_MAX) return -1;
        v = (int64_t)x->m;
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static P skip_value(P p, P e, int depth);

static P skip_container(P p, P e, int depth, int obj) {
    if (depth > MAX_DEPTH) return NULL;
    unsigned close = obj ? '}' : ']';
    p = skip_ws(p + 1, e);
    if (p < e && *p == close) return p + 1;
    for (;;) {
        if (obj) {
            P s;
            Py_ssize_t n;
            int esc;
            if (p >= e || *p != '"' || !(p = jstring(p, e, &s, &n, &esc))) return NULL;
            p = skip_ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = skip_ws(p + 1, e);
        }
        if (!(p = skip_value(p, e, depth + 1))) return NULL;
        p = skip_ws(p, e);
        if (p >= e) return NULL;
        if (*p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        return *p == close ? p + 1 : NULL;
    }
}

static P skip_literal(P p, P e, const char *lit, size_t k) {
    return ((size_t)(e - p) >= k && memcmp(p, lit, k) == 0) ? p + k : NULL;
}

static P skip_value(P p, P e, int depth) {
    if (p >= e) return NULL;
    P s;
    Py_ssize_t n;
    int esc;
    Num x;
    switch (*p) {
    case '"': return jstring(p, e, &s, &n, &esc);
    case '{': return skip_container(p, e, depth, 1);
    case '[': return skip_container(p, e, depth, 0);
    case 't': return skip_literal(p, e, "true", 4);
    case 'f': return skip_literal(p, e, "false", 5);
    case 'n': return skip_literal(p, e, "null", 4);
    default: return jnumber(p, e, &x);
    }
}

static inline int key_is(P s, Py_ssize_t n, const char *k, size_t kn) {
    return (size_t)n == kn && memcmp(s, k, kn) == 0;
}
#define KEY(s, n, lit) key_is((s), (n), lit, sizeof lit - 1)

/* args fields, in the order of the int64 columns */
enum { A_STREAM, A_CORR, A_DEVICE, A_GID, A_NID, A_CHAN, A_CTYPE, NA_INT };
#define MAX_DIMS 16

typedef struct {
    int kind;              /* 0 absent, 1 null, 2 object, 3 another value */
    int bad;               /* a field of _Args of another type or out of its bounds (or given twice) */
    int shape_bad;         /* a launch-shape field of another type */
    int64_t v[NA_INT];
    unsigned seen;         /* bit per field, incl. the shape fields */
    P ct_s;                /* channel_type given as a name (NULL: an int or absent) */
    Py_ssize_t ct_n;
    int has_grid, has_block, n_grid, n_block;
    int64_t grid[MAX_DIMS], block[MAX_DIMS], smem, nbytes;
} Args;

static P int_field(P p, P e, Args *a, int j, int64_t lo, int64_t hi, int depth) {
    Num x;
    if (a->seen & (1u << j)) a->bad = 1; /* msgspec keeps the last; refused here (see the contract) */
    a->seen |= 1u << j;
    if (p < e && (*p == '-' || (*p >= '0' && *p <= '9'))) {
        if (!(p = jnumber(p, e, &x))) return NULL;
        if (num_i64(&x, lo, hi, &a->v[j]) < 0) a->bad = 1;
        return p;
    }
    a->bad = 1;
    return skip_value(p, e, depth);
}

/* A grid or block: null, or an array of ints (a value out of int64 fails the scan: msgspec keeps it). */
static P dims_field(P p, P e, Args *a, int which, int depth, int *fail) {
    int bit = which ? 8 : 7;
    int *has = which ? &a->has_block : &a->has_grid, *cnt = which ? &a->n_block : &a->n_grid;
    int64_t *out = which ? a->block : a->grid;
    if (a->seen & (1u << bit)) *fail = 1;
    a->seen |= 1u << bit;
    *has = 0;
    *cnt = 0;
    if (p < e && *p == 'n') return skip_literal(p, e, "null", 4);
    if (p >= e || *p != '[') {
        a->shape_bad = 1;
        return skip_value(p, e, depth);
    }
    P q = skip_ws(p + 1, e);
    *has = 1;
    if (q < e && *q == ']') return q + 1;
    for (;;) {
        Num x;
        if (q < e && (*q == '-' || (*q >= '0' && *q <= '9'))) {
            if (!(q = jnumber(q, e, &x))) return NULL;
            if (!x.isint) a->shape_bad = 1;
            else if (x.big || *cnt >= MAX_DIMS || num_i64(&x, INT64_MIN, INT64_MAX, &out[*cnt]) < 0) *fail = 1;
            else (*cnt)++;
        } else {
            a->shape_bad = 1;
            if (!(q = skip_value(q, e, depth + 1))) return NULL;
        }
        q = skip_ws(q, e);
        if (q >= e) return NULL;
        if (*q == ',') {
            q = skip_ws(q + 1, e);
            continue;
        }
        return *q == ']' ? q + 1 : NULL;
    }
}

static P i64_shape_field(P p, P e, Args *a, int bit, int64_t *out, int depth, int *fail) {
    Num x;
    if (a->seen & (1u << bit)) *fail = 1;
    a->seen |= 1u << bit;
    if (p < e && (*p == '-' || (*p >= '0' && *p <= '9'))) {
        if (!(p = jnumber(p, e, &x))) return NULL;
        if (!x.isint) a->shape_bad = 1;
        else if (num_i64(&x, INT64_MIN, INT64_MAX, out) < 0) *fail = 1;
        return p;
    }
    a->shape_bad = 1;
    return skip_value(p, e, depth);
}

static P parse_args(P p, P e, Args *a, int64_t max_gid, int depth, int *fail) {
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    for (;;) {
        P s;
        Py_ssize_t n;
        int esc;
        if (p >= e || *p != '"' || !(p = jstring(p, e, &s, &n, &esc))) return NULL;
        if (esc) *fail = 1; /* an escaped key may name a field */
        p = skip_ws(p, e);
        if (p >= e || *p != ':') return NULL;
        p = skip_ws(p + 1, e);
        if (KEY(s, n, "stream")) p = int_field(p, e, a, A_STREAM, 0, INT64_MAX, depth + 1);
        else if (KEY(s, n, "correlation")) p = int_field(p, e, a, A_CORR, 0, INT64_MAX, depth + 1);
        else if (KEY(s, n, "device")) p = int_field(p, e, a, A_DEVICE, 0, INT32_MAX, depth + 1);
        else if (KEY(s, n, "graph id")) p = int_field(p, e, a, A_GID, 0, max_gid, depth + 1);
        else if (KEY(s, n, "graph node id")) p = int_field(p, e, a, A_NID, 0, INT64_MAX, depth + 1);
        else if (KEY(s, n, "channel")) p = int_field(p, e, a, A_CHAN, 0, INT32_MAX, depth + 1);
        else if (KEY(s, n, "channel_type")) {
            if (p < e && *p == '"') {
                if (a->seen & (1u << A_CTYPE)) a->bad = 1;
                a->seen |= 1u << A_CTYPE;
                P cs;
                Py_ssize_t cn;
                int cesc;
                if (!(p = jstring(p, e, &cs, &cn, &cesc))) return NULL;
                if (cesc) *fail = 1;
                a->ct_s = cs;
                a->ct_n = cn;
                a->v[A_CTYPE] = -1;
            } else {
                p = int_field(p, e, a, A_CTYPE, 0, INT32_MAX, depth + 1);
                a->ct_s = NULL;
            }
        } else if (KEY(s, n, "grid")) p = dims_field(p, e, a, 0, depth + 1, fail);
        else if (KEY(s, n, "block")) p = dims_field(p, e, a, 1, depth + 1, fail);
        else if (KEY(s, n, "shared memory")) p = i64_shape_field(p, e, a, 9, &a->smem, depth + 1, fail);
        else if (KEY(s, n, "bytes")) p = i64_shape_field(p, e, a, 10, &a->nbytes, depth + 1, fail);
        else p = skip_value(p, e, depth + 1);
        if (!p) return NULL;
        p = skip_ws(p, e);
        if (p >= e) return NULL;
        if (*p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        return *p == '}' ? p + 1 : NULL;
    }
}

/* launch_shape (trace/model.py) of (grid, block): 0 when either is missing or empty; -1 where the
 * compiler has no 128-bit integers (the caller then leaves the run to msgspec). */
static int64_t shape_key(const Args *a) {
    if (!a->has_grid || !a->has_block || !a->n_grid || !a->n_block) return 0;
#ifndef __SIZEOF_INT128__
    return -1;
#else
    const int64_t M = (int64_t)1 << 62;
    __int128 key = 1;
    for (int k = 0; k < a->n_grid + a->n_block; k++) {
        int64_t v = k < a->n_grid ? a->grid[k] : a->block[k - a->n_grid];
        key = (key * 1000003 + v) % M;
        if (key < 0) key += M; /* Python's modulo: never negative */
    }
    return key ? (int64_t)key : 1;
#endif
}

typedef struct {
    Py_ssize_t n, cap;
    int64_t *gi, *col[NA_INT], *shape, *smem, *nbytes;
    int8_t *kind;
    double *ts, *dur;
    int32_t *name;
    Py_ssize_t nl, lcap;
    int64_t *lpos, *lcorr;
    double *lts, *ldur;
    Py_ssize_t n_other, first_other; /* GPU categories of other phases than "X": how many, the first */
} Rows;

static int grow(void **p, Py_ssize_t cap, size_t size) {
    void *q = PyMem_Realloc(*p, (size_t)cap * size);
    if (!q) return -1;
    *p = q;
    return 0;
}

static int rows_reserve(Rows *r) {
    if (r->n < r->cap) return 0;
    Py_ssize_t cap = r->cap ? r->cap * 2 : 4096;
    if (grow((void **)&r->gi, cap, 8) || grow((void **)&r->shape, cap, 8) || grow((void **)&r->smem, cap, 8) ||
        grow((void **)&r->nbytes, cap, 8) || grow((void **)&r->kind, cap, 1) || grow((void **)&r->ts, cap, 8) ||
        grow((void **)&r->dur, cap, 8) || grow((void **)&r->name, cap, 4))
        return -1;
    for (int j = 0; j < NA_INT; j++)
        if (grow((void **)&r->col[j], cap, 8)) return -1;
    r->cap = cap;
    return 0;
}

static int launches_reserve(Rows *r) {
    if (r->nl < r->lcap) return 0;
    Py_ssize_t cap = r->lcap ? r->lcap * 2 : 1024;
    if (grow((void **)&r->lpos, cap, 8) || grow((void **)&r->lcorr, cap, 8) || grow((void **)&r->lts, cap, 8) ||
        grow((void **)&r->ldur, cap, 8))
        return -1;
    r->lcap = cap;
    return 0;
}

static void rows_free(Rows *r) {
    PyMem_Free(r->gi); PyMem_Free(r->shape); PyMem_Free(r->smem); PyMem_Free(r->nbytes); PyMem_Free(r->kind);
    PyMem_Free(r->ts); PyMem_Free(r->dur); PyMem_Free(r->name);
    for (int j = 0; j < NA_INT; j++) PyMem_Free(r->col[j]);
    PyMem_Free(r->lpos); PyMem_Free(r->lcorr); PyMem_Free(r->lts); PyMem_Free(r->ldur);
}

/* Categories: the codes dict's keys as UTF-8, compared by length and bytes. */
#define MAX_CATS 128
typedef struct {
    const char *s[MAX_CATS];
    Py_ssize_t n[MAX_CATS];
    int8_t code[MAX_CATS];
    int k;
} Cats;

static int8_t cat_code(const Cats *c, P s, Py_ssize_t n) {
    for (int i = 0; i < c->k; i++)
        if (c->n[i] == n && (n == 0 || (c->s[i][0] == (char)s[0] && memcmp(c->s[i], s, (size_t)n) == 0)))
            return c->code[i];
    return 4;
}

/* Kernel names: a direct-mapped cache from the name's bytes (in the buffer) to its index. */
#define NAME_SLOTS 1024
typedef struct {
    P s;
    Py_ssize_t n;
    int32_t idx;
} NameSlot;

static inline unsigned name_hash(P s, Py_ssize_t n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL;
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        h ^= a * 0xC2B2AE3D27D4EB4FULL;
        h ^= (b + (uint64_t)s[n / 2]) * 0x165667B19E3779F9ULL;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001B3ULL;
    }
    return (unsigned)(h >> 40) & (NAME_SLOTS - 1);
}

static PyObject *scan(PyObject *mod, PyObject *args) {
    PyObject *bufobj, *codes, *names, *ct_names;
    Py_ssize_t start, end;
    long long max_gid;
    (void)mod;
    if (!PyArg_ParseTuple(args, "OnnO!O!O!L", &bufobj, &start, &end, &PyDict_Type, &codes, &PyDict_Type, &names,
                          &PyList_Type, &ct_names, &max_gid))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *added = NULL;
    Rows r;
    memset(&r, 0, sizeof r);
    Py_ssize_t ct0 = PyList_GET_SIZE(ct_names);
    NameSlot *slots = NULL;
    Cats cats;
    cats.k = 0;
    if (start < 0 || end > view.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "scan: the run is outside the buffer");
        goto error;
    }
    {
        Py_ssize_t pos = 0;
        PyObject *key, *val;
        while (PyDict_Next(codes, &pos, &key, &val)) {
            if (!PyUnicode_Check(key) || cats.k >= MAX_CATS) continue;
            long c = PyLong_AsLong(val);
            if (c == -1 && PyErr_Occurred()) goto error;
            Py_ssize_t n;
            const char *s = PyUnicode_AsUTF8AndSize(key, &n);
            if (!s) goto error;
            cats.s[cats.k] = s;
            cats.n[cats.k] = n;
            cats.code[cats.k++] = (int8_t)(c < 0 || c > 4 ? 4 : c);
        }
    }
    if (!(added = PyList_New(0)) || !(slots = PyMem_Calloc(NAME_SLOTS, sizeof(NameSlot)))) {
        PyErr_NoMemory();
        goto error;
    }
    P b = (P)view.buf, p = b + start, e = b + end;
    Py_ssize_t i = 0;
    int fail = 0;
    p = skip_ws(p, e);
    while (p < e) {
        if (*p != '{') goto fallback;
        /* one event */
        P ph = NULL, cat = NULL, nm = NULL;
        Py_ssize_t ph_n = 0, cat_n = 0, nm_n = 0;
        int ph_esc = 0, cat_esc = 0, nm_esc = 0;
        unsigned seen = 0;
        double ts = NAN, dur = NAN;
        Args a;
        a.kind = 0; a.bad = 0; a.shape_bad = 0; a.seen = 0; a.ct_s = NULL;
        a.v[A_STREAM] = -1; a.v[A_CORR] = -1; a.v[A_DEVICE] = 0; a.v[A_GID] = 0; a.v[A_NID] = -1;
        a.v[A_CHAN] = -1; a.v[A_CTYPE] = -1;
        a.has_grid = a.has_block = a.n_grid = a.n_block = 0;
        a.smem = -1; a.nbytes = -1;
        p = skip_ws(p + 1, e);
        if (p < e && *p == '}') {
            p++;
        } else {
            for (;;) {
                P s;
                Py_ssize_t n;
                int esc;
                if (p >= e || *p != '"' || !(p = jstring(p, e, &s, &n, &esc))) goto fallback;
                if (esc) goto fallback;
                p = skip_ws(p, e);
                if (p >= e || *p != ':') goto fallback;
                p = skip_ws(p + 1, e);
                int which = KEY(s, n, "ph") ? 0 : KEY(s, n, "cat") ? 1 : KEY(s, n, "name") ? 2 : KEY(s, n, "ts") ? 3
                          : KEY(s, n, "dur") ? 4 : KEY(s, n, "args") ? 5 : -1;
                if (which >= 0) {
                    if (seen & (1u << which)) goto fallback;
                    seen |= 1u << which;
                }
                if (which >= 0 && which <= 2) {
                    P vs;
                    Py_ssize_t vn;
                    int vesc;
                    if (p >= e || *p != '"' || !(p = jstring(p, e, &vs, &vn, &vesc))) goto fallback;
                    if (which == 0) { ph = vs; ph_n = vn; ph_esc = vesc; }
                    else if (which == 1) { cat = vs; cat_n = vn; cat_esc = vesc; }
                    else { nm = vs; nm_n = vn; nm_esc = vesc; }
                } else if (which == 3 || which == 4) {
                    Num x;
                    if (p >= e || !(*p == '-' || (*p >= '0' && *p <= '9')) || !(p = jnumber(p, e, &x))) goto fallback;
                    if (num_f64(&x, which == 3 ? &ts : &dur) < 0) goto fallback;
                } else if (which == 5) {
                    if (p < e && *p == '{') {
                        a.kind = 2;
                        if (!(p = parse_args(p, e, &a, max_gid, 2, &fail))) goto fallback;
                        if (fail) goto fallback;
                    } else if (p < e && *p == 'n') {
                        a.kind = 1;
                        if (!(p = skip_literal(p, e, "null", 4))) goto fallback;
                    } else {
                        a.kind = 3;
                        if (!(p = skip_value(p, e, 2))) goto fallback;
                    }
                } else {
                    if (!(p = skip_value(p, e, 2))) goto fallback;
                }
                p = skip_ws(p, e);
                if (p >= e) goto fallback;
                if (*p == ',') {
                    p = skip_ws(p + 1, e);
                    continue;
                }
                if (*p != '}') goto fallback;
                p++;
                break;
            }
        }
        /* what the msgspec path does with the event */
        if (cat_esc) goto fallback;
        int8_t code = cat ? cat_code(&cats, cat, cat_n) : cat_code(&cats, (P) "", 0);
        if (code <= 3) {
            int launch = 0;
            if (code == 3) {
                if (nm_esc) goto fallback;
                launch = nm && nm_n >= 15 && memcmp(nm, "cudaGraphLaunch", 15) == 0;
            }
            if (code <= 2 || launch) {
                if (a.kind == 3 || a.bad) goto fallback; /* its args are decoded there: the error is msgspec's */
                if (ph_esc) goto fallback;
                int x = ph && ph_n == 1 && ph[0] == 'X';
                if (x && launch) {
                    if (a.kind == 2 && a.v[A_CORR] >= 0) {
                        if (launches_reserve(&r) < 0) { PyErr_NoMemory(); goto error; }
                        r.lpos[r.nl] = i;
                        r.lcorr[r.nl] = a.v[A_CORR];
                        r.ldur[r.nl] = dur;
                        r.lts[r.nl++] = ts;
                    }
                } else if (code <= 2 && !x) {
                    if (!ph || ph_n == 0) goto fallback; /* no phase: the msgspec path refuses it, with the message */
                    if (r.n_other++ == 0) r.first_other = i; /* not GPU work: counted, the caller says so */
                } else if (x) {
                    if (nm_esc) goto fallback;
                    if (rows_reserve(&r) < 0) { PyErr_NoMemory(); goto error; }
                    Py_ssize_t g = r.n;
                    r.gi[g] = i;
                    r.kind[g] = code;
                    r.ts[g] = ts;
                    r.dur[g] = dur;
                    for (int j = 0; j < NA_INT; j++) r.col[j][g] = a.v[j];
                    if (a.ct_s) { /* a channel type given as a name: 1000 + its index in ct_names */
                        PyObject *u = PyUnicode_DecodeUTF8((const char *)a.ct_s, a.ct_n, "strict");
                        if (!u) goto error;
                        Py_ssize_t k = PySequence_Index(ct_names, u);
                        if (k < 0) {
                            PyErr_Clear();
                            k = PyList_GET_SIZE(ct_names);
                            if (PyList_Append(ct_names, u) < 0) { Py_DECREF(u); goto error; }
                        }
                        Py_DECREF(u);
                        r.col[A_CTYPE][g] = 1000 + k;
                    }
                    if (a.v[A_NID] < 0 && !a.shape_bad) {
                        if ((r.shape[g] = shape_key(&a)) < 0) goto fallback;
                        r.smem[g] = a.smem;
                        r.nbytes[g] = a.nbytes;
                    } else {
                        r.shape[g] = 0;
                        r.smem[g] = -1;
                        r.nbytes[g] = -1;
                    }
                    P ns = nm ? nm : (P) "";
                    Py_ssize_t nn = nm ? nm_n : 0;
                    NameSlot *sl = &slots[name_hash(ns, nn)];
                    if (sl->s && sl->n == nn && memcmp(sl->s, ns, (size_t)nn) == 0) {
                        r.name[g] = sl->idx;
                    } else {
                        PyObject *u = PyUnicode_DecodeUTF8((const char *)ns, nn, "strict");
                        if (!u) goto error;
                        PyObject *idx = PyDict_GetItemWithError(names, u); /* borrowed */
                        long v;
                        if (idx) {
                            v = PyLong_AsLong(idx);
                        } else if (PyErr_Occurred()) {
                            Py_DECREF(u);
                            goto error;
                        } else {
                            v = (long)PyDict_GET_SIZE(names);
                            PyObject *vi = PyLong_FromLong(v);
                            if (!vi || PyDict_SetItem(names, u, vi) < 0 || PyList_Append(added, u) < 0) {
                                Py_XDECREF(vi);
                                Py_DECREF(u);
                                goto error;
                            }
                            Py_DECREF(vi);
                        }
                        Py_DECREF(u);
                        if (v == -1 && PyErr_Occurred()) goto error;
                        sl->s = ns;
                        sl->n = nn;
                        sl->idx = (int32_t)v;
                        r.name[g] = (int32_t)v;
                    }
                    r.n++;
                }
            }
        }
        i++;
        p = skip_ws(p, e);
        if (p >= e) break;
        if (*p != ',') goto fallback;
        p = skip_ws(p + 1, e);
        if (p >= e) goto fallback; /* a comma with no event after it */
    }
    {
        PyObject *o[22];
        Py_ssize_t m = r.n;
        o[0] = PyLong_FromSsize_t(i);
        o[1] = PyBytes_FromStringAndSize((const char *)r.gi, m * 8);
        o[2] = PyBytes_FromStringAndSize((const char *)r.kind, m);
        o[3] = PyBytes_FromStringAndSize((const char *)r.ts, m * 8);
        o[4] = PyBytes_FromStringAndSize((const char *)r.dur, m * 8);
        for (int j = 0; j < NA_INT; j++) o[5 + j] = PyBytes_FromStringAndSize((const char *)r.col[j], m * 8);
        o[12] = PyBytes_FromStringAndSize((const char *)r.name, m * 4);
        o[13] = PyBytes_FromStringAndSize((const char *)r.shape, m * 8);
        o[14] = PyBytes_FromStringAndSize((const char *)r.smem, m * 8);
        o[15] = PyBytes_FromStringAndSize((const char *)r.nbytes, m * 8);
        o[16] = PyBytes_FromStringAndSize((const char *)r.lpos, r.nl * 8);
        o[17] = PyBytes_FromStringAndSize((const char *)r.lcorr, r.nl * 8);
        o[18] = PyBytes_FromStringAndSize((const char *)r.lts, r.nl * 8);
        o[19] = PyLong_FromSsize_t(r.n_other);
        o[20] = PyLong_FromSsize_t(r.n_other ? r.first_other : -1);
        o[21] = PyBytes_FromStringAndSize((const char *)r.ldur, r.nl * 8);
        int ok = 1;
        for (int k = 0; k < 22; k++) ok &= o[k] != NULL;
        if (ok) result = PyTuple_New(22);
        for (int k = 0; k < 22; k++) {
            if (result) PyTuple_SET_ITEM(result, k, o[k]);
            else Py_XDECREF(o[k]);
        }
        if (!result) goto error;
    }
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
    goto undo;
error:
    result = NULL;
undo:
    if (added) { /* names added by this call: taken out again (the msgspec path adds them in its order) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(added); k++)
            if (PyDict_DelItem(names, PyList_GET_ITEM(added, k)) < 0) PyErr_Clear();
        if (PyList_GET_SIZE(ct_names) > ct0 && PyList_SetSlice(ct_names, ct0, PyList_GET_SIZE(ct_names), NULL) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
done:
    Py_XDECREF(added);
    PyMem_Free(slots);
    rows_free(&r);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"gpu_columns", gpu_columns, METH_VARARGS,
     "gpu_columns(evs, fields, arg_fields, arg_defaults, codes, names): the GPU events' columns of a chunk."},
    {"scan", scan, METH_VARARGS,
     "scan(buf, start, end, codes, names, ct_names, max_graph_id): the GPU events' columns of a run of events, "
     "read from the JSON text, or None (then decode it with msgspec)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_columns",
                                    "The trace reader's columns of GPU events, in one pass (optional).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columns(void) {
    for (int c = 0x20; c < 0x80; c++) plain_char[c] = c != '"' && c != '\\';
    return PyModule_Create(&moddef);
}
