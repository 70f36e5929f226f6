/* The cover sums of cgtool.inspect.analyzers.cover: for each waiting item, the other items' cover
 * times their overlap with its wait, added one at a time in the items' order.
 *
 * Why C: `cgtool deps` asks it for every late or fake-serialized item of a trace (722,215 queries
 * over 999,990 events of 18 a replay on the 10^6-event `cgtool trace` of benchmarks/bench_deps.py;
 * 666,660 on the torch.profiler trace). Each query's sum runs over the items of its replay in order,
 * so that it rounds exactly as cgtool.inspect.cost.mean_cover's loop: numpy does it as one pass per
 * operation over (queries x items-per-replay) arrays, which cost as much as the integral by prefix
 * sums it replaced (an approximation: 4e-4 off the loop on that trace) and was the largest step of
 * the analysis (docs/performance.md#hand-written-code). Here it is one pass over the items of each
 * query's replay, in the loop's own arithmetic. The module is optional: without it (no C compiler at
 * install) the numpy version runs, and tests/test_cover.py checks that both give the loop's bits.
 * Built with -ffp-contract=off: a fused multiply-add would round c * ov + t once, not twice.
 *
 * sums(lo, hi, qgroup, bounds, s, e, c, skip, out)
 *   lo, hi   float64[Q]: each query's wait [lo, hi)
 *   qgroup   int64[Q]: each query's group (replay), an index into bounds
 *   bounds   int64[G + 1]: the items of group g are at positions bounds[g] .. bounds[g + 1] - 1
 *   s, e, c  float64[n]: the items' start, end and cover, in that layout
 *   skip     int64[Q]: a position each query leaves out (its own item), or -1; or None
 *   out      float64[Q], written: sum over the group's positions p (p != skip) of
 *            c[p] * ov where ov = min(e[p], hi) - max(s[p], lo) > 0, in increasing p, from 0.0
 * Times are finite (a NaN time would be compared differently than numpy.minimum does).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get(PyObject *obj, Buf *b, const char *what, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) return -1;
    b->held = 1;
    const char *f = b->view.format ? b->view.format : "B";
    char k = (f[0] == '<' || f[0] == '=' || f[0] == '@') ? f[1] : f[0];
    int isfloat = what[0] == 'f';
    int ok = b->view.itemsize == 8 && (isfloat ? k == 'd' : (k == 'q' || k == 'l'));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "sums: %s: expected a contiguous %s array", what + 1,
                     isfloat ? "float64" : "int64");
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, int n) {
    for (int i = 0; i < n; i++)
        if (bufs[i].held) PyBuffer_Release(&bufs[i].view);
}

static PyObject *sums(PyObject *self, PyObject *args) {
    PyObject *o[9];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8]))
        return NULL;
    /* The first letter of each name: f (float64) or i (int64). */
    static const char *names[9] = {"flo", "fhi", "iqgroup", "ibounds", "fs", "fe", "fc", "iskip", "fout"};
    Buf b[9];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 9; i++) {
        if (i == 7 && o[i] == Py_None) continue;
        if (get(o[i], &b[i], names[i], i == 8) < 0) {
            release(b, 9);
            return NULL;
        }
    }
    Py_ssize_t q = b[0].view.len / 8, n = b[4].view.len / 8, ng = b[3].view.len / 8 - 1;
    if (b[1].view.len / 8 != q || b[2].view.len / 8 != q || b[8].view.len / 8 != q ||
        (b[7].held && b[7].view.len / 8 != q) || b[5].view.len / 8 != n || b[6].view.len / 8 != n || ng < 0) {
        release(b, 9);
        PyErr_SetString(PyExc_ValueError, "sums: the arrays' lengths do not match");
        return NULL;
    }
    const double *lo = b[0].view.buf, *hi = b[1].view.buf, *s = b[4].view.buf, *e = b[5].view.buf,
                 *c = b[6].view.buf;
    const int64_t *grp = b[2].view.buf, *bounds = b[3].view.buf, *skip = b[7].held ? b[7].view.buf : NULL;
    double *out = b[8].view.buf;
    for (Py_ssize_t g = 0; g < ng; g++) {
        if (bounds[g] < 0 || bounds[g] > bounds[g + 1] || bounds[g + 1] > n) {
            release(b, 9);
            PyErr_SetString(PyExc_ValueError, "sums: bounds are not increasing positions of the items");
            return NULL;
        }
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < q; k++) {
        int64_t g = grp[k];
        if (g < 0 || g >= ng) {
            bad = 1;
            break;
        }
        double l = lo[k], h = hi[k], t = 0.0;
        int64_t sk = skip ? skip[k] : -1;
        for (int64_t p = bounds[g]; p < bounds[g + 1]; p++) {
            double a = e[p] < h ? e[p] : h;  /* numpy.minimum / maximum of finite values */
            double z = s[p] > l ? s[p] : l;
            double ov = a - z;
            if (ov > 0 && p != sk) t += c[p] * ov;
        }
        out[k] = t;
    }
    Py_END_ALLOW_THREADS
    release(b, 9);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "sums: a query's group is not an index into bounds");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"sums", sums, METH_VARARGS, "Cover times overlap per query, added in the items' order (see the header)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cover", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cover(void) { return PyModule_Create(&module); }
