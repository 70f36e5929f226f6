/* The trace reader's columns of GPU events, in one pass over a decoded chunk (cgtool.artifacts.trace).
 *
 * Why C: the reader decodes a chunk of chrome-trace events with msgspec into small structs, then
 * turns the GPU events among them into numpy columns. In Python that is one C-level pass per field
 * (``np.fromiter(map(attrgetter(...)))``: about 15 passes a chunk), which cost 1.0-1.3 s of the
 * 3.8 s `cgtool deps` spent on 10^6 events on the CPU machine (benchmarks/bench_deps.py, its
 * profile), more than msgspec's decoding. Here every field is read straight from the struct's slot
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
 * buffers sized for the whole chunk raised the reader's peak memory by ~8% at 10^6 events: the
 * allocator keeps freed blocks of that size). The first pass sets each event's code and counts the
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

static PyMethodDef methods[] = {
    {"gpu_columns", gpu_columns, METH_VARARGS,
     "gpu_columns(evs, fields, arg_fields, arg_defaults, codes, names): the GPU events' columns of a chunk."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_columns",
                                    "The trace reader's columns of GPU events, in one pass (optional).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&moddef); }
