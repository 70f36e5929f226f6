/* The graph export's reads in C (`cgtool/capture/graphread.py`, `cgtool/capture/export.py`): one call
 * for every per-node driver and CUPTI call of a graph, the adjacency lists, the node dicts.
 *
 * Any Python the package supports (3.10+): nothing here reads interpreter internals. `cgtool record`'s
 * node callback (`capture/record/_nodecb.c`, 3.11+) is a separate module; the export and the recorder
 * both import this one. Optional: without a C compiler the Python code these functions stand in for
 * runs instead (`graphread.py`, `export.py`), and `tests/test_export_cpu.py` runs both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline void *read_ptr(const void *base, Py_ssize_t off) {
    void *p;
    memcpy(&p, (const char *)base + off, sizeof p);
    return p;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

/* call_each(fn, handles, base, stride): fn(handle, base + i * stride) for every handle i, where fn is
 * a driver or CUPTI entry point `int fn(void *handle, void *out)` (cuGraphKernelNodeGetParams_v2,
 * cuGraphNodeGetType, cuptiGetGraphNodeId); the indices whose call failed. One C loop instead of a
 * ctypes call per node: a graph export makes two such calls for every node. */
typedef int (*call2_fn)(void *h, void *out);

static PyObject *call_each(PyObject *mod, PyObject *args) {
    unsigned long long addr, base;
    Py_ssize_t stride;
    PyObject *handles;
    (void)mod;
    if (!PyArg_ParseTuple(args, "KO!Kn", &addr, &PyList_Type, &handles, &base, &stride)) return NULL;
    call2_fn fn = (call2_fn)(uintptr_t)addr;
    Py_ssize_t n = PyList_GET_SIZE(handles);
    PyObject *failed = PyList_New(0);
    if (!failed) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        void *h = PyLong_AsVoidPtr(PyList_GET_ITEM(handles, i));
        if (!h && PyErr_Occurred()) { Py_DECREF(failed); return NULL; }
        if (fn(h, (void *)(uintptr_t)(base + (unsigned long long)(i * stride)))) {
            PyObject *v = PyLong_FromSsize_t(i);
            if (!v || PyList_Append(failed, v) < 0) { Py_XDECREF(v); Py_DECREF(failed); return NULL; }
            Py_DECREF(v);
        }
    }
    return failed;
}

/* dicts(keys, columns, skip_none): [{keys[k]: columns[k][i] ...} for each i], in key order; a key
 * whose flag in skip_none is true is left out of a dict where its value is None. The export's node
 * dicts: a Python comprehension over zip() costs several times this loop
 * (docs/performance.md#hand-written-code). */
static PyObject *dicts(PyObject *mod, PyObject *args) {
    PyObject *keys, *cols, *skip;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyTuple_Type, &keys, &PyTuple_Type, &cols, &PyTuple_Type, &skip))
        return NULL;
    Py_ssize_t nk = PyTuple_GET_SIZE(keys);
    if (PyTuple_GET_SIZE(cols) != nk || PyTuple_GET_SIZE(skip) != nk)
        return PyErr_Format(PyExc_ValueError, "keys, columns and skip_none differ in length");
    Py_ssize_t n = -1;
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *c = PyTuple_GET_ITEM(cols, k);
        if (!PyList_Check(c)) return PyErr_Format(PyExc_TypeError, "column %zd is not a list", k);
        if (n < 0) n = PyList_GET_SIZE(c);
        else if (PyList_GET_SIZE(c) != n) return PyErr_Format(PyExc_ValueError, "column %zd has another length", k);
    }
    if (n < 0) n = 0;
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyDict_New();
        if (!d) { Py_DECREF(out); return NULL; }
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *v = PyList_GET_ITEM(PyTuple_GET_ITEM(cols, k), i);
            if (v == Py_None && PyObject_IsTrue(PyTuple_GET_ITEM(skip, k))) continue;
            if (PyDict_SetItem(d, PyTuple_GET_ITEM(keys, k), v) < 0) { Py_DECREF(d); Py_DECREF(out); return NULL; }
        }
        PyList_SET_ITEM(out, i, d);
    }
    return out;
}

/* ---- The graph export's reads, in C: every per-node driver and CUPTI call of one graph in one call.
 *
 * read_graph((get_nodes, get_edges_v2, kernel_params, func_name, node_id), graph, param_size)
 *   get_nodes     CUresult cuGraphGetNodes(CUgraph, CUgraphNode *, size_t *)
 *   get_edges_v2  CUresult cuGraphGetEdges_v2(CUgraph, CUgraphNode *, CUgraphNode *, CUgraphEdgeData *, size_t *)
 *                 (0: not there; the edges come back as None)
 *   kernel_params CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2 *)
 *   func_name     CUresult cuFuncGetName(const char **, CUfunction)
 *   node_id       CUptiResult cuptiGetGraphNodeId(CUgraphNode, uint64_t *) (0: no ids read)
 * -> (handles: list[int], frm: bytes | None, to: bytes | None, params: bytearray (param_size a node),
 *     refused: list[int] (nodes whose kernel_params call failed: not kernels), funcs: {function: name},
 *     ids: bytes | None)
 *
 * Why C: the same reads from Python (ctypes calls, C-level map()s, numpy columns, a dict per
 * distinct function) cost the recorder more inside the program's cudaGraphInstantiate, and made the
 * export of a 1,000-node graph several times the bare cuGraphGetNodes + cuGraphGetEdges calls
 * (benchmarks/bench_export.py; docs/performance.md#hand-written-code).
 * The struct layouts stay in Python (_fastcuda.KernelParamsV2): the function pointer is the first
 * field, and param_size bytes are given to the driver per node. */
typedef int (*get_nodes_fn)(void *graph, uint64_t *nodes, size_t *n);
typedef int (*get_edges_fn)(void *graph, uint64_t *from, uint64_t *to, void *data, size_t *n);
typedef int (*func_name_fn)(const char **name, void *func);

#define EDGE_DATA_BYTES 8 /* sizeof(CUgraphEdgeData) */

static PyObject *read_graph(PyObject *mod, PyObject *args) {
    unsigned long long a_nodes, a_edges, a_params, a_name, a_id, graph;
    Py_ssize_t psize;
    (void)mod;
    if (!PyArg_ParseTuple(args, "(KKKKK)Kn", &a_nodes, &a_edges, &a_params, &a_name, &a_id, &graph, &psize))
        return NULL;
    if (!a_nodes || !a_params || !a_name || psize < (Py_ssize_t)sizeof(void *))
        return PyErr_Format(PyExc_ValueError, "read_graph: an entry point is missing or the parameter size is wrong");
    get_nodes_fn get_nodes = (get_nodes_fn)(uintptr_t)a_nodes;
    get_edges_fn get_edges = (get_edges_fn)(uintptr_t)a_edges;
    call2_fn kparams = (call2_fn)(uintptr_t)a_params, node_id = (call2_fn)(uintptr_t)a_id;
    func_name_fn func_name = (func_name_fn)(uintptr_t)a_name;
    void *g = (void *)(uintptr_t)graph;

    PyObject *handles = NULL, *frm = NULL, *to = NULL, *params = NULL, *refused = NULL, *funcs = NULL, *ids = NULL;
    PyObject *result = NULL;
    uint64_t *nodes = NULL;
    size_t n = 0, m = 0;
    int rc = get_nodes(g, NULL, &n);
    if (rc) { PyErr_Format(PyExc_OSError, "cuGraphGetNodes returned %d", rc); goto done; }
    if (n) {
        nodes = PyMem_Malloc(n * sizeof(uint64_t));
        if (!nodes) { PyErr_NoMemory(); goto done; }
        size_t got = n;
        rc = get_nodes(g, nodes, &got);
        if (rc) { PyErr_Format(PyExc_OSError, "cuGraphGetNodes returned %d", rc); goto done; }
        if (got < n) n = got;
    }
    handles = PyList_New((Py_ssize_t)n);
    if (!handles) goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *h = PyLong_FromUnsignedLongLong(nodes[i]);
        if (!h) goto done;
        PyList_SET_ITEM(handles, (Py_ssize_t)i, h);
    }

    /* Edges: None when the entry point is missing or refuses (the caller asks cuda.bindings then). */
    if (get_edges && get_edges(g, NULL, NULL, NULL, &m) == 0) {
        frm = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(m * 8));
        to = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(m * 8));
        if (!frm || !to) goto done;
        if (m) {
            void *data = PyMem_Calloc(m, EDGE_DATA_BYTES);
            if (!data) { PyErr_NoMemory(); goto done; }
            size_t got = m;
            rc = get_edges(g, (uint64_t *)PyBytes_AS_STRING(frm), (uint64_t *)PyBytes_AS_STRING(to), data, &got);
            PyMem_Free(data);
            if (rc) { Py_CLEAR(frm); Py_CLEAR(to); }
            else if (got < m) { /* fewer edges than counted: the first `got` */
                PyObject *f2 = PyBytes_FromStringAndSize(PyBytes_AS_STRING(frm), (Py_ssize_t)(got * 8));
                PyObject *t2 = PyBytes_FromStringAndSize(PyBytes_AS_STRING(to), (Py_ssize_t)(got * 8));
                Py_SETREF(frm, f2);
                Py_SETREF(to, t2);
                if (!frm || !to) goto done;
            }
        }
    }
    if (!frm) { frm = Py_None; Py_INCREF(frm); Py_XDECREF(to); to = Py_None; Py_INCREF(to); }

    /* Kernel parameters straight into the array of structs; a node that is not a kernel refuses. */
    params = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n * psize);
    refused = PyList_New(0);
    funcs = PyDict_New();
    if (!params || !refused || !funcs) goto done;
    char *pbuf = PyByteArray_AS_STRING(params);
    memset(pbuf, 0, (size_t)n * (size_t)psize);
    for (size_t i = 0; i < n; i++) {
        if (kparams((void *)(uintptr_t)nodes[i], pbuf + i * (size_t)psize)) {
            PyObject *v = PyLong_FromSize_t(i);
            if (!v || PyList_Append(refused, v) < 0) { Py_XDECREF(v); goto done; }
            Py_DECREF(v);
            memset(pbuf + i * (size_t)psize, 0, (size_t)psize); /* whatever it left is not a function */
        }
    }
    /* Names: once per distinct function (function 0, for refusing nodes, has none). */
    void *last = NULL;
    for (size_t i = 0; i < n; i++) {
        void *f = read_ptr(pbuf + i * (size_t)psize, 0);
        if (i && f == last) continue; /* runs of one kernel: no dict look-up */
        last = f;
        PyObject *key = PyLong_FromVoidPtr(f);
        if (!key) goto done;
        int has = PyDict_Contains(funcs, key);
        if (has < 0) { Py_DECREF(key); goto done; }
        if (!has) {
            const char *name = NULL;
            PyObject *val;
            if (f && func_name(&name, f) == 0 && name && *name)
                val = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
            else { val = Py_None; Py_INCREF(val); }
            if (!val || PyDict_SetItem(funcs, key, val) < 0) { Py_XDECREF(val); Py_DECREF(key); goto done; }
            Py_DECREF(val);
        }
        Py_DECREF(key);
    }

    /* CUPTI's node ids. */
    if (node_id) {
        ids = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
        if (!ids) goto done;
        uint64_t *out = (uint64_t *)PyBytes_AS_STRING(ids);
        for (size_t i = 0; i < n; i++) {
            rc = node_id((void *)(uintptr_t)nodes[i], out + i);
            if (rc) { PyErr_Format(PyExc_OSError, "cuptiGetGraphNodeId returned %d", rc); goto done; }
        }
    } else { ids = Py_None; Py_INCREF(ids); }
    result = PyTuple_Pack(7, handles, frm, to, params, refused, funcs, ids);
done:
    PyMem_Free(nodes);
    Py_XDECREF(handles); Py_XDECREF(frm); Py_XDECREF(to); Py_XDECREF(params);
    Py_XDECREF(refused); Py_XDECREF(funcs); Py_XDECREF(ids);
    return result;
}

/* adjacency(handles, frm, to) -> (dependencies, dependents): per node, the indices of its
 * predecessors and successors in the order the edge lists give them; edges naming a handle that is
 * not in `handles` are left out. frm and to: buffers of uint64 handles (cuGraphGetEdges' output).
 * Why C: the Python version (a dict and two map()s, then two appends an edge) cost more than the
 * driver's own edge call; an open-addressing table and lists made at their final size cost far
 * less (docs/performance.md#hand-written-code; tests/test_export_cpu.py checks it against a plain
 * loop). */

static PyObject *adjacency(PyObject *mod, PyObject *args) {
    PyObject *handles;
    Py_buffer fb = {0}, tb = {0};
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!y*y*", &PyList_Type, &handles, &fb, &tb)) return NULL;
    PyObject *deps = NULL, *dents = NULL, *result = NULL, **ints = NULL;
    uint64_t *keys = NULL;
    Py_ssize_t *vals = NULL, *src = NULL, *dst = NULL, *cin = NULL, *cout = NULL;
    Py_ssize_t n = PyList_GET_SIZE(handles), m = fb.len / 8;
    if (tb.len / 8 != m) { PyErr_SetString(PyExc_ValueError, "adjacency: frm and to differ in length"); goto done; }
    size_t cap = 8;
    while (cap < (size_t)n * 2) cap <<= 1;
    keys = PyMem_Calloc(cap, sizeof(uint64_t));
    vals = PyMem_Malloc(cap * sizeof(Py_ssize_t));
    ints = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    cin = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    cout = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    src = PyMem_Malloc(((size_t)m + 1) * sizeof(Py_ssize_t));
    dst = PyMem_Malloc(((size_t)m + 1) * sizeof(Py_ssize_t));
    if (!keys || !vals || !ints || !cin || !cout || !src || !dst) { PyErr_NoMemory(); goto done; }
    Py_ssize_t zero_at = -1; /* handle 0 marks an empty slot in the table: its index is kept aside */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(handles, i));
        if (h == (uint64_t)-1 && PyErr_Occurred()) goto done;
        if (!h) { zero_at = i; continue; }
        size_t s = (size_t)mix64(h) & (cap - 1);
        while (keys[s] && keys[s] != h) s = (s + 1) & (cap - 1);
        keys[s] = h;
        vals[s] = i; /* a repeated handle maps to its last index, as dict(zip(handles, range(n))) does */
    }
    const uint64_t *F = (const uint64_t *)fb.buf, *T = (const uint64_t *)tb.buf;
    Py_ssize_t k = 0;
    for (Py_ssize_t e = 0; e < m; e++) {
        Py_ssize_t a = -1, b = -1;
        uint64_t x = F[e], y = T[e];
        if (!x) a = zero_at;
        else { size_t s = (size_t)mix64(x) & (cap - 1); while (keys[s] && keys[s] != x) s = (s + 1) & (cap - 1); if (keys[s]) a = vals[s]; }
        if (!y) b = zero_at;
        else { size_t s = (size_t)mix64(y) & (cap - 1); while (keys[s] && keys[s] != y) s = (s + 1) & (cap - 1); if (keys[s]) b = vals[s]; }
        if (a < 0 || b < 0) continue;
        src[k] = a; dst[k] = b; k++;
        cout[a]++; cin[b]++;
    }
    deps = PyList_New(n);
    dents = PyList_New(n);
    if (!deps || !dents) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyList_New(cin[i]), *t = PyList_New(cout[i]);
        if (!d || !t) { Py_XDECREF(d); Py_XDECREF(t); goto done; }
        PyList_SET_ITEM(deps, i, d);
        PyList_SET_ITEM(dents, i, t);
        cin[i] = cout[i] = 0; /* now the fill cursors */
    }
    for (Py_ssize_t e = 0; e < k; e++) {
        Py_ssize_t a = src[e], b = dst[e];
        if (!ints[a] && !(ints[a] = PyLong_FromSsize_t(a))) goto done;
        if (!ints[b] && !(ints[b] = PyLong_FromSsize_t(b))) goto done;
        Py_INCREF(ints[b]);
        PyList_SET_ITEM(PyList_GET_ITEM(dents, a), cout[a]++, ints[b]);
        Py_INCREF(ints[a]);
        PyList_SET_ITEM(PyList_GET_ITEM(deps, b), cin[b]++, ints[a]);
    }
    result = PyTuple_Pack(2, deps, dents);
done:
    if (ints) for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(ints[i]);
    PyMem_Free(ints); PyMem_Free(keys); PyMem_Free(vals); PyMem_Free(src); PyMem_Free(dst);
    PyMem_Free(cin); PyMem_Free(cout);
    Py_XDECREF(deps); Py_XDECREF(dents);
    PyBuffer_Release(&fb); PyBuffer_Release(&tb);
    return result;
}

static PyMethodDef methods[] = {
    {"read_graph", read_graph, METH_VARARGS, "read_graph(entry_points, graph, param_size): one graph's nodes, "
     "edges, kernel parameters, function names and CUPTI node ids."},
    {"adjacency", adjacency, METH_VARARGS, "adjacency(handles, frm, to): (dependencies, dependents) per node."},
    {"dicts", dicts, METH_VARARGS, "dicts(keys, columns, skip_none): one dict per row of the columns."},
    {"call_each", call_each, METH_VARARGS, "call_each(fn, handles, base, stride): indices whose call failed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_graphread", "The graph export's reads in C.",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__graphread(void) { return PyModule_Create(&moddef); }
