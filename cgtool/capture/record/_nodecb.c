/* The CUPTI callback of `cgtool record`, in C: what a graph node's creation costs the program.
 *
 * CUPTI with a C callback that returns at once leaves capture+instantiate as fast as the bare
 * capture; a Python callback through ctypes that returns at once slows it, and one that only calls
 * sys._getframe more, before any work (benchmarks/probe_record_capture.py; figures in
 * docs/performance.md#hand-written-code). So the node-creation callback, the one called for every
 * node, is this C function: it reads the graph and node handles from CUPTI's structs, walks the
 * Python frames of the creating thread with the C API, and stores what the Python path
 * (tracker.GraphTracker._node_info / attribution.grab_node_info) stores, packed into one bytes object
 * (pack_info; unpack() gives the tuple back):
 *
 *     nodes[graph][node] = ((codes, lastis, module_class, module_index, autograd_op, range), None)
 *     node_graph[node] = graph
 *
 * It also handles the runtime's graph instantiations itself (configure's `instantiate`: node
 * callbacks are ignored while one runs, its start is kept for instantiate_began()), drops the API
 * sites the recorder ignores (`enter_only`, `exit_only`), forgets destroyed graphs, counts replays
 * (when not tracing) and the memory taken from CUDA: none of these reaches Python.
 *
 * Every other callback (capture begin/end, graph-exec creation and destruction, clones) and
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
 * program frees it again, a cost per node that grows with the stack
 * (docs/performance.md#hand-written-code). The
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
/* Handled here without Python (configure's optional arguments): the runtime's graph instantiations
 * (cudaGraphInstantiate* clones every node: GRAPHNODE_CREATED + _CLONED per node, which are not the
 * program's nodes, so node callbacks are ignored while one runs; the start time is kept for the
 * recorder), and the callback sites Python has no use for (capture begin's exit, capture end's enter). */
static inline void *read_ptr(const void *base, Py_ssize_t off) {
    void *p;
    memcpy(&p, (const char *)base + off, sizeof p);
    return p;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

#define MAX_IDS 16
static int g_rt_domain = -1, g_clone_cbid = -1, g_graph_del_cbid = -1;
/* Callbacks handled here besides node creations, for the recorder's callback_stats: calls and ns
 * inside per (domain, cbid) (declared with the tables below). */
static void count_cb(int domain, uint32_t cbid, unsigned long long ns);
static Py_ssize_t g_off_site = 0;
static uint32_t g_inst_ids[MAX_IDS], g_enter_only[MAX_IDS], g_exit_only[MAX_IDS];
static int g_n_inst, g_n_enter_only, g_n_exit_only;
static int g_instantiating; /* instantiations running (any thread); atomic */
#define MAX_INST_THREADS 8
static struct { unsigned long thread; unsigned long long t0; } g_inst_start[MAX_INST_THREADS];

/* ---- Counted here, on CUDA's callback thread, without the GIL (configure's optional arguments):
 *  - memory the program takes from CUDA: cudaMalloc / cudaFree (runtime; torch's caching allocator)
 *    and cuMemCreate / cuMemRelease (driver; torch's expandable segments), successful calls only,
 *    sizes kept per pointer / handle so that a free subtracts what its allocation added. The
 *    recorder reads the total at capture begin and at instantiation: the growth in between is the
 *    capture's. Reading torch's own statistics there instead (torch._C._cuda_memoryStats builds a
 *    dict of every allocator statistic) costs more a graph (docs/performance.md#hand-written-code).
 *  - graph launches (cuGraphLaunch*, API enter) per graph exec, when the recorder does not trace
 *    (a Python callback per replay would slow a serving loop's every replay).
 * Parameter layouts (cupti's generated_cuda_runtime_api_meta.h / generated_cuda_meta.h):
 * cudaMalloc_v3020_params {void **devPtr; size_t size}, cudaFree_v3020_params {void *devPtr},
 * cuMemCreate_params {CUmemGenericAllocationHandle *handle; size_t size; ...},
 * cuMemRelease_params {CUmemGenericAllocationHandle handle}, cuGraphLaunch_params {CUgraphExec hGraphExec; ...}. */
typedef struct {
    uint64_t *keys;
    int64_t *vals;
    unsigned char *state; /* 0 empty, 1 live, 2 removed */
    size_t cap, used;     /* used: live + removed slots */
    int lock;
} Table;

static Table g_allocs, g_launches;
static int64_t g_alloc_total;
static int g_drv_domain = -1, g_count_launches;
static uint32_t g_rt_malloc = UINT32_MAX, g_rt_free = UINT32_MAX, g_drv_create = UINT32_MAX, g_drv_release = UINT32_MAX;
static uint32_t g_launch_ids[MAX_IDS];
static int g_n_launch;
static Py_ssize_t g_off_params = 16, g_off_ret = 24;
static Table g_ccalls, g_cns; /* (domain << 32 | cbid) -> calls, ns inside */
#define HANDLE_TAG (1ULL << 63) /* cuMemCreate handles beside device pointers in one table */

static inline void t_lock(Table *t) { while (__atomic_test_and_set(&t->lock, __ATOMIC_ACQUIRE)) {} }
static inline void t_unlock(Table *t) { __atomic_clear(&t->lock, __ATOMIC_RELEASE); }

static size_t t_find(const Table *t, uint64_t k, int for_insert) {
    size_t m = t->cap - 1, s = (size_t)mix64(k) & m, first_free = (size_t)-1;
    for (size_t probe = 0; probe < t->cap; probe++, s = (s + 1) & m) {
        if (t->state[s] == 0) return for_insert && first_free != (size_t)-1 ? first_free : s;
        if (t->state[s] == 2) { if (first_free == (size_t)-1) first_free = s; continue; }
        if (t->keys[s] == k) return s;
    }
    return first_free;
}

/* Grow (or create) so that one more key fits; 0 on success. Called with the lock held. */
static int t_reserve(Table *t) {
    if (t->cap && (t->used + 1) * 10 < t->cap * 7) return 0;
    size_t ncap = t->cap ? t->cap * 2 : 256;
    uint64_t *k = calloc(ncap, sizeof *k);
    int64_t *v = calloc(ncap, sizeof *v);
    unsigned char *st = calloc(ncap, 1);
    if (!k || !v || !st) { free(k); free(v); free(st); return -1; }
    Table n = {k, v, st, ncap, 0, 0};
    for (size_t i = 0; i < t->cap; i++)
        if (t->state[i] == 1) {
            size_t s = t_find(&n, t->keys[i], 1);
            n.keys[s] = t->keys[i]; n.vals[s] = t->vals[i]; n.state[s] = 1; n.used++;
        }
    free(t->keys); free(t->vals); free(t->state);
    t->keys = n.keys; t->vals = n.vals; t->state = n.state; t->cap = ncap; t->used = n.used;
    return 0;
}

/* vals[k] += delta (created at 0); the new value. */
static int64_t t_add(Table *t, uint64_t k, int64_t delta) {
    int64_t out = 0;
    t_lock(t);
    if (t_reserve(t) == 0) {
        size_t s = t_find(t, k, 1);
        if (s != (size_t)-1) {
            if (t->state[s] != 1) { if (t->state[s] == 0) t->used++; t->keys[s] = k; t->vals[s] = 0; t->state[s] = 1; }
            out = t->vals[s] += delta;
        }
    }
    t_unlock(t);
    return out;
}

static void count_cb(int domain, uint32_t cbid, unsigned long long ns) {
    uint64_t k = ((uint64_t)(uint32_t)domain << 32) | cbid;
    t_add(&g_ccalls, k, 1);
    if (ns) t_add(&g_cns, k, (int64_t)ns);
}

/* Remove k; its value (0 when absent). */
static int64_t t_take(Table *t, uint64_t k) {
    int64_t out = 0;
    t_lock(t);
    if (t->cap) {
        size_t s = t_find(t, k, 0);
        if (s != (size_t)-1 && t->state[s] == 1) { out = t->vals[s]; t->state[s] = 2; }
    }
    t_unlock(t);
    return out;
}

static int64_t t_get(Table *t, uint64_t k) {
    int64_t out = 0;
    t_lock(t);
    if (t->cap) {
        size_t s = t_find(t, k, 0);
        if (s != (size_t)-1 && t->state[s] == 1) out = t->vals[s];
    }
    t_unlock(t);
    return out;
}

static void t_clear(Table *t) {
    t_lock(t);
    free(t->keys); free(t->vals); free(t->state);
    t->keys = NULL; t->vals = NULL; t->state = NULL; t->cap = t->used = 0;
    t_unlock(t);
}

/* An allocation API's exit: account for it when it succeeded. */
static void account(int driver, uint32_t cbid, const void *cbdata) {
    const char *params = read_ptr(cbdata, g_off_params);
    const int *ret = read_ptr(cbdata, g_off_ret);
    if (!params || !ret || *ret != 0) return;
    if (!driver && cbid == g_rt_malloc) {
        void **where = read_ptr(params, 0);
        size_t size;
        memcpy(&size, params + 8, sizeof size);
        if (where && *where) {
            t_add(&g_allocs, (uint64_t)(uintptr_t)*where, (int64_t)size);
            __atomic_add_fetch(&g_alloc_total, (int64_t)size, __ATOMIC_SEQ_CST);
        }
    } else if (!driver && cbid == g_rt_free) {
        void *p = read_ptr(params, 0);
        if (p) __atomic_sub_fetch(&g_alloc_total, t_take(&g_allocs, (uint64_t)(uintptr_t)p), __ATOMIC_SEQ_CST);
    } else if (driver && cbid == g_drv_create) {
        uint64_t *where = read_ptr(params, 0);
        size_t size;
        memcpy(&size, params + 8, sizeof size);
        if (where) {
            t_add(&g_allocs, *where | HANDLE_TAG, (int64_t)size);
            __atomic_add_fetch(&g_alloc_total, (int64_t)size, __ATOMIC_SEQ_CST);
        }
    } else if (driver && cbid == g_drv_release) {
        uint64_t h;
        memcpy(&h, params, sizeof h);
        __atomic_sub_fetch(&g_alloc_total, t_take(&g_allocs, h | HANDLE_TAG), __ATOMIC_SEQ_CST);
    }
}
static Py_ssize_t g_off_desc = 16, g_off_graph = 0, g_off_node = 16;
static unsigned long long g_calls, g_ns, g_errors, g_timed; /* node callbacks; g_ns over the g_timed sampled */
static int g_public_walk; /* walk with the public frame API even where the internal walk is built */
static PyObject *s_forward, *s_self, *s_modules, *s_name, *s_varnames;

static inline unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}


/* Whether a code object's name is `want` (an interned identifier). Names in code objects are
 * interned, so the pointer says it at once; the length rules out nearly every other name before a
 * full compare (which cost ~90 instructions a frame in every node callback, callgrind). */
static inline int same_name(PyObject *name, PyObject *want) {
    if (name == want) return 1;
    if (!PyUnicode_Check(name) || PyUnicode_GET_LENGTH(name) != PyUnicode_GET_LENGTH(want)) return 0;
    return PyUnicode_Compare(name, want) == 0;
}

/* The nn.Module whose `forward` runs in `frame` (its `self`), or NULL; no exception left set. */
static PyObject *module_of(PyFrameObject *frame, PyCodeObject *code) {
    if (code->co_argcount < 1 || !same_name(code->co_name, s_forward)) {
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
                  same_name(PyTuple_GET_ITEM(names, 0), s_self);
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
    if (code->co_argcount < 1 || !same_name(code->co_name, s_forward)) {
        if (PyErr_Occurred()) PyErr_Clear();
        return NULL;
    }
    PyObject *names = code->co_localsplusnames;
    if (!names || PyTuple_GET_SIZE(names) < 1 || !same_name(PyTuple_GET_ITEM(names, 0), s_self)) {
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

/* ---- What a node callback keeps: one bytes object, packed (no container the cyclic GC counts).
 *
 *   int32 nframes, int32 module_index, then pointers to module class, autograd op name, range name
 *   (NULL for none), then per frame: code object pointer, int32 lasti (bytes), int32 0.
 *
 * A capture makes nodes by the hundred; keeping each as four new containers (two lists, two tuples)
 * counts towards the cyclic GC's next collection whether tracked or not: recorded captures of
 * benchmarks/probe_record_capture.py kept that way set off collections (mostly full ones in a torch
 * process), the bare ones none (docs/performance.md#hand-written-code).
 * Bytes and ints are not GC objects. The objects pointed to are kept alive once each in g_kept
 * (code objects, module classes, interned op and range names: few distinct ones in a program);
 * unpack() rebuilds the tuple the Python callback stores, off the capture path (the writer thread). */
#define PACK_HEAD 32
#define PACK_FRAME 16
static Table g_kept; /* object address -> 1: one reference held for every object a packed info names */

/* Objects known to be in g_kept, by address, direct-mapped: a node's frames are mostly the code
 * objects of the node before, so the table (a lock and a probe) is asked only on a miss. Called
 * with the GIL held. */
#define KEPT_CACHE 4096
static PyObject *g_kept_cache[KEPT_CACHE];

static inline PyObject *kept(PyObject *o) {
    if (!o) return o;
    size_t slot = ((uintptr_t)o >> 4) & (KEPT_CACHE - 1);
    if (g_kept_cache[slot] == o) return o;
    uint64_t k = (uint64_t)(uintptr_t)o;
    if (!t_get(&g_kept, k)) {
        Py_INCREF(o);
        t_add(&g_kept, k, 1);
    }
    g_kept_cache[slot] = o;
    return o;
}

/* The op / range name as an interned string (equal names: one object), kept; NULL for None. */
static PyObject *kept_name(PyObject *s) {
    if (!s || s == Py_None || !PyUnicode_CheckExact(s)) return NULL;
    Py_INCREF(s);
    PyUnicode_InternInPlace(&s);
    kept(s);
    Py_DECREF(s);
    return s;
}

static PyObject *pack_info(PyCodeObject **codes, int *lastis, int n, PyObject *module, int module_index) {
    PyObject *op = autograd_op(); /* new reference (None when no backward runs) */
    if (!op) return NULL;
    Py_ssize_t nr = g_ranges && PyList_Check(g_ranges) ? PyList_GET_SIZE(g_ranges) : 0;
    PyObject *rng = nr ? PyList_GET_ITEM(g_ranges, nr - 1) : NULL;
    PyObject *b = PyBytes_FromStringAndSize(NULL, PACK_HEAD + (Py_ssize_t)n * PACK_FRAME);
    if (!b) { Py_DECREF(op); return NULL; }
    char *p = PyBytes_AS_STRING(b);
    int32_t head[2] = {n, module_index};
    void *ptrs[3] = {kept(module), kept_name(op), kept_name(rng)};
    Py_DECREF(op);
    memcpy(p, head, 8);
    memcpy(p + 8, ptrs, 24);
    for (int i = 0; i < n; i++) {
        void *c = kept((PyObject *)codes[i]);
        int32_t l[2] = {lastis[i], 0};
        memcpy(p + PACK_HEAD + i * PACK_FRAME, &c, 8);
        memcpy(p + PACK_HEAD + i * PACK_FRAME + 8, l, 8);
    }
    return b;
}

static inline int is_stop(PyCodeObject *c, Py_ssize_t nstop) {
    for (Py_ssize_t j = 0; j < nstop; j++)
        if (PyList_GET_ITEM(g_stop, j) == (PyObject *)c) return 1;
    return 0;
}

static PyObject *node_info_public(void);

/* The packed info of the node being made on the running thread; NULL on error. */
static PyObject *node_info(void) {
#ifdef CGTOOL_FRAME_INTERNALS
    if (!g_public_walk) {
        PyCodeObject *codes[MAX_FRAMES];
        int lastis[MAX_FRAMES], n = 0, module_index = -1;
        PyObject *module = NULL;
        Py_ssize_t nstop = g_stop ? PyList_GET_SIZE(g_stop) : 0;
        for (IFrame *f = current_iframe(PyThreadState_Get()); f && n < MAX_FRAMES; f = first_complete(f->previous)) {
            PyCodeObject *c = iframe_code(f);
            if (nstop && is_stop(c, nstop)) break;
            int lasti = _PyInterpreterFrame_LASTI(f);
            codes[n] = c;
            lastis[n] = lasti < 0 ? -1 : lasti * (int)sizeof(_Py_CODEUNIT);
            if (!module) {
                module = module_of_iframe(f, c);
                if (module) module_index = n;
            }
            n++;
        }
        PyObject *result = pack_info(codes, lastis, n, module, module_index);
        Py_XDECREF(module);
        return result;
    }
#endif
    return node_info_public();
}

/* The same with the public frame API (frame objects made for the walk). */
static PyObject *node_info_public(void) {
    PyFrameObject *frames[MAX_FRAMES];
    PyCodeObject *codes[MAX_FRAMES];
    int lastis[MAX_FRAMES];
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
    PyObject *module = NULL;
    int module_index = -1;
    for (int i = 0; i < n; i++) {
        PyCodeObject *c = PyFrame_GetCode(frames[i]); /* new reference; the frame holds another */
        codes[i] = c;
        lastis[i] = PyFrame_GetLasti(frames[i]);
        if (!module) {
            module = module_of(frames[i], c);
            if (module) module_index = i;
        }
        Py_DECREF(c);
    }
    PyObject *result = pack_info(codes, lastis, n, module, module_index);
    Py_XDECREF(module);
    for (int i = 0; i < n; i++) Py_DECREF(frames[i]);
    return result;
}

/* unpack(info): a packed node info as the Python callback's tuple,
 * ((codes, lastis, module_class, module_index, op, range), None); any other value as it is. */
static PyObject *unpack(PyObject *mod, PyObject *b) {
    (void)mod;
    if (!PyBytes_Check(b)) { Py_INCREF(b); return b; }
    Py_ssize_t len = PyBytes_GET_SIZE(b);
    const char *p = PyBytes_AS_STRING(b);
    int32_t head[2];
    void *ptrs[3];
    if (len < PACK_HEAD) return PyErr_Format(PyExc_ValueError, "unpack: %zd bytes is no node info", len);
    memcpy(head, p, 8);
    memcpy(ptrs, p + 8, 24);
    int n = head[0];
    if (n < 0 || len != PACK_HEAD + (Py_ssize_t)n * PACK_FRAME)
        return PyErr_Format(PyExc_ValueError, "unpack: %zd bytes do not hold %d frames", len, n);
    PyObject *codes = PyList_New(n), *lastis = PyList_New(n);
    if (!codes || !lastis) { Py_XDECREF(codes); Py_XDECREF(lastis); return NULL; }
    for (int i = 0; i < n; i++) {
        PyObject *c;
        int32_t l;
        memcpy(&c, p + PACK_HEAD + i * PACK_FRAME, 8);
        memcpy(&l, p + PACK_HEAD + i * PACK_FRAME + 8, 4);
        PyObject *li = PyLong_FromLong(l);
        if (!li) { Py_DECREF(codes); Py_DECREF(lastis); return NULL; }
        Py_INCREF(c);
        PyList_SET_ITEM(codes, i, c);
        PyList_SET_ITEM(lastis, i, li);
    }
    PyObject *none = Py_None;
    PyObject *m = ptrs[0] ? (PyObject *)ptrs[0] : none, *op = ptrs[1] ? (PyObject *)ptrs[1] : none,
             *rng = ptrs[2] ? (PyObject *)ptrs[2] : none;
    PyObject *info = Py_BuildValue("(NNOiOO)", codes, lastis, m, (int)head[1], op, rng);
    if (!info) return NULL;
    return Py_BuildValue("(NO)", info, Py_None);
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

/* A graph is being destroyed: its handle (and its nodes') may be reused, so what was kept for it
 * goes: nodes.pop(graph) and node_graph.pop(node) for each of its nodes. */
static void drop_graph(void *graph) {
    PyObject *g = PyLong_FromVoidPtr(graph);
    if (!g) { g_errors++; PyErr_Clear(); return; }
    PyObject *per = PyDict_GetItemWithError(g_nodes, g); /* borrowed */
    if (per) {
        Py_INCREF(per);
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(per, &pos, &k, &v))
            if (PyDict_DelItem(g_node_graph, k) < 0) PyErr_Clear();
        if (PyDict_DelItem(g_nodes, g) < 0) PyErr_Clear();
        Py_DECREF(per);
    } else if (PyErr_Occurred()) {
        g_errors++;
        PyErr_Clear();
    }
    Py_DECREF(g);
}

static void forward_to_python(int domain, uint32_t cbid, const void *cbdata) {
    PyObject *r = PyObject_CallFunction(g_handler, "iIK", domain, (unsigned int)cbid,
                                        (unsigned long long)(uintptr_t)cbdata);
    if (!r) { g_errors++; PyErr_Clear(); }
    Py_XDECREF(r);
}

static inline int has_id(const uint32_t *ids, int n, uint32_t cbid) {
    for (int i = 0; i < n; i++)
        if (ids[i] == cbid) return 1;
    return 0;
}

/* An instantiation's API enter (site 0) or exit on this thread: no Python, no GIL. */
static void instantiation(int site) {
    if (site == 0) {
        __atomic_add_fetch(&g_instantiating, 1, __ATOMIC_SEQ_CST);
        unsigned long t = PyThread_get_thread_ident();
        int slot = 0;
        for (int i = 0; i < MAX_INST_THREADS; i++)
            if (g_inst_start[i].thread == t || g_inst_start[i].thread == 0) { slot = i; break; }
        g_inst_start[slot].thread = t;
        g_inst_start[slot].t0 = now_ns();
    } else if (__atomic_load_n(&g_instantiating, __ATOMIC_SEQ_CST) > 0) {
        __atomic_sub_fetch(&g_instantiating, 1, __ATOMIC_SEQ_CST);
    }
}

/* The CUpti_CallbackFunc: void (void *userdata, CUpti_CallbackDomain, CUpti_CallbackId, const void *). */
static void callback(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    (void)userdata;
    if (!g_active || Py_IsInitialized() == 0) return;
    if (domain == g_res_domain && ((int)cbid == g_node_cbid || (int)cbid == g_clone_cbid) &&
        __atomic_load_n(&g_instantiating, __ATOMIC_SEQ_CST) > 0)
        return; /* an instantiation's clones */
    if (domain == g_drv_domain && cbdata) {
        if (cbid == g_drv_create || cbid == g_drv_release) {
            int site;
            memcpy(&site, (const char *)cbdata + g_off_site, sizeof site);
            if (site != 0) { account(1, cbid, cbdata); count_cb(domain, cbid, 0); }
            return;
        }
        if (g_count_launches && has_id(g_launch_ids, g_n_launch, cbid)) {
            int site;
            memcpy(&site, (const char *)cbdata + g_off_site, sizeof site);
            const char *params = read_ptr(cbdata, g_off_params);
            if (site == 0 && params) {
                void *exec = read_ptr(params, 0); /* cuGraphLaunch(hGraphExec, hStream) */
                if (exec) t_add(&g_launches, (uint64_t)(uintptr_t)exec, 1);
                count_cb(domain, cbid, 0);
            }
            return;
        }
    }
    if (domain == g_rt_domain && cbdata) {
        int site;
        memcpy(&site, (const char *)cbdata + g_off_site, sizeof site);
        if (cbid == g_rt_malloc || cbid == g_rt_free) {
            if (site != 0) { account(0, cbid, cbdata); count_cb(domain, cbid, 0); }
            return;
        }
        if (has_id(g_inst_ids, g_n_inst, cbid)) {
            unsigned long long t0 = now_ns();
            instantiation(site);
            count_cb(domain, cbid, now_ns() - t0);
            return;
        }
        if (site == 0 ? has_id(g_exit_only, g_n_exit_only, cbid) : has_id(g_enter_only, g_n_enter_only, cbid))
            return;
    }
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return;
#else
    if (_Py_IsFinalizing()) return;
#endif
    PyGILState_STATE st = PyGILState_Ensure();
    if (g_active && g_handler) {
        if (domain == g_res_domain && (int)cbid == g_node_cbid && cbdata &&
            PyThread_get_thread_ident() == g_main) {
            /* Timed one call in 16 (a clock read costs a sizeable share of the callback): stats()
             * scales the sampled time up to every call. */
            int timed = (g_calls & 15) == 0;
            unsigned long long t0 = timed ? now_ns() : 0;
            void *desc = read_ptr(cbdata, g_off_desc);
            if (desc) store_node(read_ptr(desc, g_off_graph), read_ptr(desc, g_off_node));
            g_calls++;
            if (timed) { g_ns += now_ns() - t0; g_timed++; }
        } else if (domain == g_res_domain && (int)cbid == g_graph_del_cbid && cbdata) {
            unsigned long long t0 = now_ns();
            void *desc = read_ptr(cbdata, g_off_desc);
            if (desc) drop_graph(read_ptr(desc, g_off_graph));
            count_cb(domain, cbid, now_ns() - t0);
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

static int read_ids(PyObject *seq, uint32_t *out, int *n, const char *what) {
    *n = 0;
    if (!seq || seq == Py_None) return 0;
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(fast);
    if (k > MAX_IDS) { Py_DECREF(fast); PyErr_Format(PyExc_ValueError, "%s: at most %d ids", what, MAX_IDS); return -1; }
    for (Py_ssize_t i = 0; i < k; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
        out[i] = (uint32_t)v;
    }
    *n = (int)k;
    Py_DECREF(fast);
    return 0;
}

static PyObject *configure(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *names[] = {"handler", "nodes", "node_graph", "ranges", "stop", "main_thread", "resource_domain",
                            "node_cbid", "off_desc", "off_graph", "off_node", "clone_cbid", "runtime_domain",
                            "off_site", "instantiate", "enter_only", "exit_only", "graph_destroy_cbid",
                            "driver_domain", "alloc_ids", "launch_ids", "off_params", "off_ret", NULL};
    PyObject *h, *nodes, *ng, *ranges, *stop, *inst = NULL, *enter_only = NULL, *exit_only = NULL;
    PyObject *alloc = NULL, *launch = NULL;
    unsigned long main_thread;
    int dom, cbid, clone = -1, rt = -1, gdel = -1, drv = -1;
    Py_ssize_t od, og, on, osite = 0, oparams = 16, oret = 24;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O!OO!kiinnn|iinOOOiiOOnn", names, &h, &PyDict_Type, &nodes,
                                     &PyDict_Type, &ng, &ranges, &PyList_Type, &stop, &main_thread, &dom, &cbid, &od,
                                     &og, &on, &clone, &rt, &osite, &inst, &enter_only, &exit_only, &gdel, &drv,
                                     &alloc, &launch, &oparams, &oret))
        return NULL;
    uint32_t aids[MAX_IDS];
    int naids = 0;
    if (read_ids(alloc, aids, &naids, "alloc_ids") < 0 || read_ids(launch, g_launch_ids, &g_n_launch, "launch_ids") < 0)
        return NULL;
    if (naids != 0 && naids != 4)
        return PyErr_Format(PyExc_ValueError, "alloc_ids: (cudaMalloc, cudaFree, cuMemCreate, cuMemRelease) callback ids");
    g_rt_malloc = naids ? aids[0] : UINT32_MAX;
    g_rt_free = naids ? aids[1] : UINT32_MAX;
    g_drv_create = naids ? aids[2] : UINT32_MAX;
    g_drv_release = naids ? aids[3] : UINT32_MAX;
    g_count_launches = g_n_launch > 0;
    g_drv_domain = drv;
    g_off_params = oparams;
    g_off_ret = oret;
    t_clear(&g_allocs);
    t_clear(&g_launches);
    g_alloc_total = 0;
    t_clear(&g_ccalls);
    t_clear(&g_cns);
    if (read_ids(inst, g_inst_ids, &g_n_inst, "instantiate") < 0 ||
        read_ids(enter_only, g_enter_only, &g_n_enter_only, "enter_only") < 0 ||
        read_ids(exit_only, g_exit_only, &g_n_exit_only, "exit_only") < 0)
        return NULL;
    g_clone_cbid = clone;
    g_graph_del_cbid = gdel;
    g_rt_domain = rt;
    g_off_site = osite;
    g_instantiating = 0;
    memset(g_inst_start, 0, sizeof g_inst_start);
    clear_refs();
    Py_INCREF(h); g_handler = h;
    Py_INCREF(nodes); g_nodes = nodes;
    Py_INCREF(ng); g_node_graph = ng;
    Py_INCREF(ranges); g_ranges = ranges;
    Py_INCREF(stop); g_stop = stop;
    g_main = main_thread;
    g_res_domain = dom; g_node_cbid = cbid;
    g_off_desc = od; g_off_graph = og; g_off_node = on;
    g_calls = g_ns = g_errors = g_timed = 0;
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

/* instantiate_began(thread): when the instantiation running on `thread` began (seconds on
 * time.perf_counter()'s clock, CLOCK_MONOTONIC), or None; the entry is taken. */
static PyObject *instantiate_began(PyObject *mod, PyObject *arg) {
    (void)mod;
    unsigned long t = PyLong_AsUnsignedLong(arg);
    if (t == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    for (int i = 0; i < MAX_INST_THREADS; i++)
        if (g_inst_start[i].thread == t && g_inst_start[i].t0) {
            double s = (double)g_inst_start[i].t0 / 1e9;
            g_inst_start[i].t0 = 0;
            return PyFloat_FromDouble(s);
        }
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    unsigned long long ns = g_timed ? (unsigned long long)((double)g_ns * (double)g_calls / (double)g_timed) : 0;
    return Py_BuildValue("(KKK)", g_calls, ns, g_errors);
}

static PyObject *alloc_bytes(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    return PyLong_FromLongLong(__atomic_load_n(&g_alloc_total, __ATOMIC_SEQ_CST));
}

static int exec_arg(PyObject *arg, uint64_t *out) {
    *out = PyLong_AsUnsignedLongLong(arg);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *launch_count(PyObject *mod, PyObject *arg) {
    uint64_t k;
    (void)mod;
    if (exec_arg(arg, &k) < 0) return NULL;
    return PyLong_FromLongLong(t_get(&g_launches, k));
}

static PyObject *take_launches(PyObject *mod, PyObject *arg) {
    uint64_t k;
    (void)mod;
    if (exec_arg(arg, &k) < 0) return NULL;
    return PyLong_FromLongLong(t_take(&g_launches, k));
}

/* A copy of a table's live entries (keys and values, PyMem arrays the caller frees), taken under
 * its lock: Python objects are made from it afterwards, with the lock released. -1: no memory. */
static int t_snapshot(Table *t, uint64_t **keys, int64_t **vals, size_t *m) {
    *keys = NULL; *vals = NULL; *m = 0;
    t_lock(t);
    size_t cap = t->cap;
    if (cap) {
        *keys = PyMem_Malloc(cap * sizeof **keys);
        *vals = PyMem_Malloc(cap * sizeof **vals);
        if (*keys && *vals)
            for (size_t i = 0; i < cap; i++)
                if (t->state[i] == 1) { (*keys)[*m] = t->keys[i]; (*vals)[*m] = t->vals[i]; (*m)++; }
    }
    t_unlock(t);
    if (cap && (!*keys || !*vals)) { PyMem_Free(*keys); PyMem_Free(*vals); PyErr_NoMemory(); return -1; }
    return 0;
}

static PyObject *launch_counts(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    uint64_t *keys;
    int64_t *vals;
    size_t m;
    if (t_snapshot(&g_launches, &keys, &vals, &m) < 0) return NULL;
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < m; i++) {
        PyObject *k = PyLong_FromUnsignedLongLong(keys[i]), *v = PyLong_FromLongLong(vals[i]);
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) Py_CLEAR(d);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    PyMem_Free(keys); PyMem_Free(vals);
    return d;
}

/* ((domain, cbid) -> (calls, ns inside)) of the other callbacks handled here: graph destructions and
 * instantiations (timed), launches and allocation exits (counted only: the time inside is a table
 * update, and a clock read would cost as much). */
static PyObject *handled_stats(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    uint64_t *keys;
    int64_t *calls;
    size_t m;
    if (t_snapshot(&g_ccalls, &keys, &calls, &m) < 0) return NULL;
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < m; i++) {
        PyObject *k = Py_BuildValue("(iI)", (int)(keys[i] >> 32), (unsigned int)(keys[i] & 0xFFFFFFFFu));
        PyObject *v = Py_BuildValue("(LL)", (long long)calls[i], (long long)t_get(&g_cns, keys[i]));
        if (!k || !v || PyDict_SetItem(d, k, v) < 0) Py_CLEAR(d);
        Py_XDECREF(k); Py_XDECREF(v);
    }
    PyMem_Free(keys); PyMem_Free(calls);
    return d;
}

/* after_fork_child(main_thread): in the child of a fork, the only thread left is the one that forked: a
 * table lock another thread held at the fork would never be released, and the counts are the parent's.
 * Locks reset without taking them, tables and counters emptied, the main thread is the forking one. The
 * objects kept for packed infos stay (the child's copies of the parent's objects). */
static void t_reset(Table *t) {
    t->lock = 0;
    t_clear(t);
}

static PyObject *after_fork_child(PyObject *mod, PyObject *arg) {
    (void)mod;
    unsigned long t = PyLong_AsUnsignedLong(arg);
    if (t == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    t_reset(&g_allocs);
    t_reset(&g_launches);
    t_reset(&g_ccalls);
    t_reset(&g_cns);
    g_kept.lock = 0;
    g_alloc_total = 0;
    g_instantiating = 0;
    memset(g_inst_start, 0, sizeof g_inst_start);
    g_calls = g_ns = g_errors = g_timed = 0;
    g_main = t;
    Py_RETURN_NONE;
}

static PyObject *address(PyObject *mod, PyObject *unused) {
    (void)mod; (void)unused;
    return PyLong_FromVoidPtr((void *)&callback);
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(handler, nodes, node_graph, ranges, stop, main_thread, resource_domain, node_cbid, off_desc, "
     "off_graph, off_node): start storing nodes; everything else goes to handler(domain, cbid, cbdata)."},
    {"unpack", unpack, METH_O, "unpack(info): a packed node info as ((codes, lastis, module, module_index, op, "
     "range), None); anything else as it is."},
    {"instantiate_began", instantiate_began, METH_O, "instantiate_began(thread): the start of its instantiation."},
    {"set_autograd", set_autograd, METH_O, "set_autograd(fn): torch._C._current_autograd_node, or None."},
    {"deactivate", deactivate, METH_NOARGS, "Stop: the callback returns at once from now on."},
    {"stats", stats, METH_NOARGS, "(node callbacks, ns inside them, errors)."},
    {"alloc_bytes", alloc_bytes, METH_NOARGS, "Bytes taken from CUDA (cudaMalloc, cuMemCreate) and not given back, "
     "since configure()."},
    {"launch_count", launch_count, METH_O, "launch_count(exec): launches of that graph exec counted here."},
    {"take_launches", take_launches, METH_O, "take_launches(exec): its count, forgotten."},
    {"launch_counts", launch_counts, METH_NOARGS, "{exec: launches} counted here."},
    {"handled_stats", handled_stats, METH_NOARGS, "{(domain, cbid): (calls, ns)} of the other callbacks handled here."},
    {"set_walk", set_walk, METH_O, "set_walk(internal): walk CPython's frames directly (where built); "
     "whether that walk is on now."},
    {"address", address, METH_NOARGS, "The address of the C callback, for cuptiSubscribe."},
    {"after_fork_child", after_fork_child, METH_O, "after_fork_child(main_thread): in a forked child, locks and "
     "counts reset; the forking thread is the main one."},
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
