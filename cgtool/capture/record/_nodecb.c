/* The CUPTI callback of `cgtool record`, in C: what a graph node's creation costs the program.
 *
 * Measured on the GPU machine (benchmarks/probe_record_capture.py, a 24-layer model, ~127 nodes a
 * graph): CUPTI with a C callback that returns at once leaves capture+instantiate at 1.00x the bare
 * time; a Python callback through ctypes that returns at once is 1.09x, and one that only calls
 * sys._getframe 1.23x, before any work. So the node-creation callback, the one called for every
 * node, is this C function: it reads the graph and node handles from CUPTI's structs, walks the
 * Python frames of the creating thread with the C API, and stores exactly what the Python path
 * (recorder.Recorder._node_info / attribution.grab_node_info) stores:
 *
 *     nodes[graph][node] = ((codes, lastis, module_class, module_index, autograd_op, range), None)
 *     node_graph[node] = graph
 *
 * Every other callback (capture begin/end, instantiation, launches, clones, destruction) and
 * nodes made on threads other than the main one go to the Python handler(domain, cbid, cbdata).
 * The struct offsets and callback ids come from Python (_subscriber), so nothing here depends
 * on CUPTI's headers. Python >= 3.11 (PyFrame_GetLasti); the recorder falls back to its Python
 * callback when this module is missing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#error "_nodecb needs Python 3.11 or newer"
#endif

/* On 3.11-3.13 the walk reads CPython's interpreter frames directly: the public API
 * (PyThreadState_GetFrame, PyFrame_GetBack) makes a frame object for every frame walked and the
 * program frees it again, ~3 us a node on the GPU machine for a model's 20-30 frames. The
 * internal struct differs in every minor version, so this is compiled only for the three known
 * layouts; any other version walks with the public API. The fake-CUPTI test compares both walks
 * (tests/test_record_recorder_fake.py), and CI builds this for 3.11 and 3.13. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define CGTOOL_FRAME_INTERNALS 1
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#endif

#define MAX_FRAMES 96

static PyObject *g_handler;    /* callable(domain, cbid, cbdata) */
static PyObject *g_nodes;      /* dict: graph -> {node -> info} */
static PyObject *g_node_graph; /* dict: node -> graph */
static PyObject *g_ranges;     /* list: names of the open record_function ranges */
static PyObject *g_stop;       /* list of code objects where the walk stops (the launcher's own) */
static PyObject *g_autograd;   /* torch._C._current_autograd_node, or NULL */
static unsigned long g_main;   /* thread id of the main thread */
static int g_res_domain = 3, g_node_cbid = 13, g_active;
static Py_ssize_t g_off_desc = 16, g_off_graph = 0, g_off_node = 16;
static unsigned long long g_calls, g_ns, g_errors;
static int g_public_walk; /* walk with the public frame API even where the internal walk is built */
static PyObject *s_forward, *s_self, *s_modules, *s_name, *s_varnames;

static inline unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static inline void *read_ptr(const void *base, Py_ssize_t off) {
    void *p;
    memcpy(&p, (const char *)base + off, sizeof p);
    return p;
}

/* The nn.Module whose `forward` runs in `frame` (its `self`), or NULL; no exception left set. */
static PyObject *module_of(PyFrameObject *frame, PyCodeObject *code) {
    if (code->co_argcount < 1 || PyUnicode_Compare(code->co_name, s_forward) != 0) {
        if (PyErr_Occurred()) PyErr_Clear();
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030C0000
    /* `self` read straight from the frame: neither co_varnames (a new tuple on every read) nor
     * f_locals (a dict of every local) is built. */
    PyObject *obj = PyFrame_GetVar(frame, s_self);
    if (!obj) { PyErr_Clear(); return NULL; }
#else
    PyObject *names = PyObject_GetAttr((PyObject *)code, s_varnames);
    int is_self = names && PyTuple_Check(names) && PyTuple_GET_SIZE(names) > 0 &&
                  PyUnicode_Compare(PyTuple_GET_ITEM(names, 0), s_self) == 0;
    Py_XDECREF(names);
    if (!is_self) { PyErr_Clear(); return NULL; }
    PyObject *locals = PyFrame_GetLocals(frame);
    if (!locals) { PyErr_Clear(); return NULL; }
    PyObject *obj = PyObject_GetItem(locals, s_self);
    Py_DECREF(locals);
    if (!obj) { PyErr_Clear(); return NULL; }
#endif
    if (!PyObject_HasAttr(obj, s_modules)) { Py_DECREF(obj); PyErr_Clear(); return NULL; }
    PyObject *cls = (PyObject *)Py_TYPE(obj);
    Py_INCREF(cls);
    Py_DECREF(obj);
    return cls;
}

static PyObject *autograd_op(void) {
    if (!g_autograd) Py_RETURN_NONE;
    PyObject *n = PyObject_CallNoArgs(g_autograd);
    if (!n) { PyErr_Clear(); Py_RETURN_NONE; }
    if (n == Py_None) return n;
    PyObject *name = PyObject_CallMethodNoArgs(n, s_name);
    Py_DECREF(n);
    if (!name) { PyErr_Clear(); Py_RETURN_NONE; }
    PyObject *s = PyObject_Str(name);
    Py_DECREF(name);
    if (!s) { PyErr_Clear(); Py_RETURN_NONE; }
    return s;
}

#ifdef CGTOOL_FRAME_INTERNALS
typedef struct _PyInterpreterFrame IFrame;

static inline PyCodeObject *iframe_code(IFrame *f) {
#if PY_VERSION_HEX >= 0x030D0000
    return _PyFrame_GetCode(f);
#else
    return f->f_code;
#endif
}

/* The frame PyFrame_GetBack / PyThreadState_GetFrame would give: the first complete one from f. */
static inline IFrame *first_complete(IFrame *f) {
    while (f && _PyFrame_IsIncomplete(f)) f = f->previous;
    return f;
}

static inline IFrame *current_iframe(PyThreadState *ts) {
#if PY_VERSION_HEX >= 0x030D0000
    return first_complete(ts->current_frame);
#else
    return first_complete(ts->cframe->current_frame);
#endif
}

/* `self` of a frame running a `forward(self, ...)`, when it is an nn.Module: its class, or NULL. */
static PyObject *module_of_iframe(IFrame *f, PyCodeObject *code) {
    if (code->co_argcount < 1 || PyUnicode_Compare(code->co_name, s_forward) != 0) {
        if (PyErr_Occurred()) PyErr_Clear();
        return NULL;
    }
    PyObject *names = code->co_localsplusnames;
    if (!names || PyTuple_GET_SIZE(names) < 1 || PyUnicode_Compare(PyTuple_GET_ITEM(names, 0), s_self) != 0) {
        if (PyErr_Occurred()) PyErr_Clear();
        return NULL;
    }
    PyObject *obj = f->localsplus[0];
    if (obj && PyCell_Check(obj)) /* `self` captured by a closure lives in a cell */
        obj = PyCell_GET(obj);
    if (!obj || !PyObject_HasAttr(obj, s_modules)) { PyErr_Clear(); return NULL; }
    PyObject *cls = (PyObject *)Py_TYPE(obj);
    Py_INCREF(cls);
    return cls;
}
#endif

static PyObject *finish_info(PyObject *codes, PyObject *lastis, PyObject *module, int module_index) {
    PyObject *op = autograd_op();
    PyObject *rng;
    Py_ssize_t nr = g_ranges && PyList_Check(g_ranges) ? PyList_GET_SIZE(g_ranges) : 0;
    if (nr) { rng = PyList_GET_ITEM(g_ranges, nr - 1); Py_INCREF(rng); }
    else { rng = Py_None; Py_INCREF(rng); }
    PyObject *info = Py_BuildValue("(OOOiNN)", codes, lastis, module ? module : Py_None, module_index, op, rng);
    if (!info) return NULL;
    PyObject *result = PyTuple_Pack(2, info, Py_None);
    Py_DECREF(info);
    return result;
}

static inline int is_stop(PyCodeObject *c, Py_ssize_t nstop) {
    for (Py_ssize_t j = 0; j < nstop; j++)
        if (PyList_GET_ITEM(g_stop, j) == (PyObject *)c) return 1;
    return 0;
}

static PyObject *node_info_public(void);

/* ((codes, lastis, module, module_index, op, range), None) for the running thread; NULL on error. */
static PyObject *node_info(void) {
#ifdef CGTOOL_FRAME_INTERNALS
    if (!g_public_walk) {
        IFrame *frames[MAX_FRAMES];
        int n = 0;
        Py_ssize_t nstop = g_stop ? PyList_GET_SIZE(g_stop) : 0;
        for (IFrame *f = current_iframe(PyThreadState_Get()); f && n < MAX_FRAMES; f = first_complete(f->previous)) {
            if (nstop && is_stop(iframe_code(f), nstop)) break;
            frames[n++] = f;
        }
        PyObject *codes = PyList_New(n), *lastis = PyList_New(n), *module = NULL, *result = NULL;
        int module_index = -1;
        if (codes && lastis) {
            int i = 0;
            for (; i < n; i++) {
                PyCodeObject *c = iframe_code(frames[i]);
                int lasti = _PyInterpreterFrame_LASTI(frames[i]);
                PyObject *li = PyLong_FromLong(lasti < 0 ? -1 : lasti * (int)sizeof(_Py_CODEUNIT));
                if (!li) break;
                Py_INCREF(c);
                PyList_SET_ITEM(codes, i, (PyObject *)c);
                PyList_SET_ITEM(lastis, i, li);
                if (!module) {
                    module = module_of_iframe(frames[i], c);
                    if (module) module_index = i;
                }
            }
            if (i == n) result = finish_info(codes, lastis, module, module_index);
        }
        Py_XDECREF(codes);
        Py_XDECREF(lastis);
        Py_XDECREF(module);
        return result;
    }
#endif
    return node_info_public();
}

/* The same with the public frame API (frame objects made for the walk). */
static PyObject *node_info_public(void) {
    PyFrameObject *frames[MAX_FRAMES];
    int n = 0;
    PyThreadState *ts = PyThreadState_Get();
    PyFrameObject *f = PyThreadState_GetFrame(ts); /* new reference */
    Py_ssize_t nstop = g_stop ? PyList_GET_SIZE(g_stop) : 0;
    /* The launcher's frames (runpy, the boot) are not the program's: the walk ends at the first
     * frame running a stop code (attribution.stop_at). Every frame walked is a frame object made
     * for the walk, so not walking them saves about a quarter of this callback's time. */
    while (f && n < MAX_FRAMES) {
        if (nstop) {
            PyCodeObject *c = PyFrame_GetCode(f);
            int hit = is_stop(c, nstop);
            Py_DECREF(c);
            if (hit) break;
        }
        frames[n++] = f;
        f = PyFrame_GetBack(f); /* new reference */
    }
    Py_XDECREF(f);
    int keep = n;
    PyObject *codes = PyList_New(keep), *lastis = PyList_New(keep), *result = NULL;
    PyObject *module = NULL;
    int module_index = -1;
    if (!codes || !lastis) goto done;
    for (int i = 0; i < keep; i++) {
        PyCodeObject *c = PyFrame_GetCode(frames[i]); /* new reference, handed to the list */
        PyObject *li = PyLong_FromLong(PyFrame_GetLasti(frames[i]));
        if (!li) { Py_DECREF(c); goto done; }
        PyList_SET_ITEM(codes, i, (PyObject *)c);
        PyList_SET_ITEM(lastis, i, li);
        if (!module) {
            module = module_of(frames[i], c);
            if (module) module_index = i;
        }
    }
    result = finish_info(codes, lastis, module, module_index);
done:
    Py_XDECREF(codes);
    Py_XDECREF(lastis);
    Py_XDECREF(module);
    for (int i = 0; i < n; i++) Py_DECREF(frames[i]);
    return result;
}

static void store_node(void *graph, void *node) {
    PyObject *g = PyLong_FromVoidPtr(graph), *nd = PyLong_FromVoidPtr(node), *info = NULL;
    if (!g || !nd) goto fail;
    info = node_info();
    if (!info) goto fail;
    PyObject *per = PyDict_GetItemWithError(g_nodes, g); /* borrowed */
    if (!per) {
        if (PyErr_Occurred()) goto fail;
        per = PyDict_New();
        if (!per || PyDict_SetItem(g_nodes, g, per) < 0) { Py_XDECREF(per); goto fail; }
        Py_DECREF(per); /* the dict holds it */
    }
    if (PyDict_SetItem(per, nd, info) < 0 || PyDict_SetItem(g_node_graph, nd, g) < 0) goto fail;
    goto out;
fail:
    g_errors++;
    PyErr_Clear();
out:
    Py_XDECREF(g);
    Py_XDECREF(nd);
    Py_XDECREF(info);
}

static void forward_to_python(int domain, uint32_t cbid, const void *cbdata) {
    PyObject *r = PyObject_CallFunction(g_handler, "iIK", domain, (unsigned int)cbid,
                                        (unsigned long long)(uintptr_t)cbdata);
    if (!r) { g_errors++; PyErr_Clear(); }
    Py_XDECREF(r);
}

/* The CUpti_CallbackFunc: void (void *userdata, CUpti_CallbackDomain, CUpti_CallbackId, const void *). */
static void callback(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    (void)userdata;
    if (!g_active || Py_IsInitialized() == 0) return;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return;
#else
    if (_Py_IsFinalizing()) return;
#endif
    PyGILState_STATE st = PyGILState_Ensure();
    if (g_active && g_handler) {
        if (domain == g_res_domain && (int)cbid == g_node_cbid && cbdata &&
            PyThread_get_thread_ident() == g_main) {
            unsigned long long t0 = now_ns();
            void *desc = read_ptr(cbdata, g_off_desc);
            if (desc) store_node(read_ptr(desc, g_off_graph), read_ptr(desc, g_off_node));
            g_calls++;
            g_ns += now_ns() - t0;
        } else {
            forward_to_python(domain, cbid, cbdata);
        }
    }
    PyGILState_Release(st);
}

static void clear_refs(void) {
    Py_CLEAR(g_handler);
    Py_CLEAR(g_nodes);
    Py_CLEAR(g_node_graph);
    Py_CLEAR(g_ranges);
    Py_CLEAR(g_stop);
    Py_CLEAR(g_autograd);
}

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *names[] = {"handler", "nodes", "node_graph", "ranges", "stop", "main_thread", "resource_domain",
                            "node_cbid", "off_desc", "off_graph", "off_node", NULL};
    PyObject *h, *nodes, *ng, *ranges, *stop;
    unsigned long main_thread;
    int dom, cbid;
    Py_ssize_t od, og, on;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O!OO!kiinnn", names, &h, &PyDict_Type, &nodes, &PyDict_Type, &ng,
                                     &ranges, &PyList_Type, &stop, &main_thread, &dom, &cbid, &od, &og, &on))
        return NULL;
    clear_refs();
    Py_INCREF(h); g_handler = h;
    Py_INCREF(nodes); g_nodes = nodes;
    Py_INCREF(ng); g_node_graph = ng;
    Py_INCREF(ranges); g_ranges = ranges;
    Py_INCREF(stop); g_stop = stop;
    g_main = main_thread;
    g_res_domain = dom; g_node_cbid = cbid;
    g_off_desc = od; g_off_graph = og; g_off_node = on;
    g_calls = g_ns = g_errors = 0;
    g_active = 1;
    Py_RETURN_NONE;
}

static PyObject *set_autograd(PyObject *mod, PyObject *fn) {
    (void)mod;
    Py_CLEAR(g_autograd);
    if (fn != Py_None) { Py_INCREF(fn); g_autograd = fn; }
    Py_RETURN_NONE;
}

static PyObject *deactivate(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    g_active = 0;
    clear_refs();
    Py_RETURN_NONE;
}

static PyObject *set_walk(PyObject *mod, PyObject *arg) {
    (void)mod;
    int internal = PyObject_IsTrue(arg);
    if (internal < 0) return NULL;
#ifdef CGTOOL_FRAME_INTERNALS
    g_public_walk = !internal;
    return PyBool_FromLong(internal);
#else
    g_public_walk = 1;
    Py_RETURN_FALSE;
#endif
}

static PyObject *stats(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    return Py_BuildValue("(KKK)", g_calls, g_ns, g_errors);
}

static PyObject *address(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    return PyLong_FromVoidPtr((void *)&callback);
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
 * dicts: a Python comprehension over zip() costs ~0.7 us a node, this ~0.2 us (bench_export.py). */
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

static PyMethodDef methods[] = {
    {"dicts", dicts, METH_VARARGS, "dicts(keys, columns, skip_none): one dict per row of the columns."},
    {"call_each", call_each, METH_VARARGS, "call_each(fn, handles, base, stride): indices whose call failed."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(handler, nodes, node_graph, ranges, stop, main_thread, resource_domain, node_cbid, off_desc, "
     "off_graph, off_node): start storing nodes; everything else goes to handler(domain, cbid, cbdata)."},
    {"set_autograd", set_autograd, METH_O, "set_autograd(fn): torch._C._current_autograd_node, or None."},
    {"deactivate", deactivate, METH_NOARGS, "Stop: the callback returns at once from now on."},
    {"stats", stats, METH_NOARGS, "(node callbacks, ns inside them, errors)."},
    {"set_walk", set_walk, METH_O, "set_walk(internal): walk CPython's frames directly (where built); "
     "whether that walk is on now."},
    {"address", address, METH_NOARGS, "The address of the C callback, for cuptiSubscribe."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_nodecb", "cgtool record's node-creation callback in C.",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nodecb(void) {
    s_forward = PyUnicode_InternFromString("forward");
    s_self = PyUnicode_InternFromString("self");
    s_modules = PyUnicode_InternFromString("_modules");
    s_name = PyUnicode_InternFromString("name");
    s_varnames = PyUnicode_InternFromString("co_varnames");
    if (!s_forward || !s_self || !s_modules || !s_name || !s_varnames) return NULL;
    return PyModule_Create(&moddef);
}
