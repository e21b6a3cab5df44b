#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include "demo_headers.h"

static PyObject *rms_norm(PyObject *self, PyObject *args) {
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
    Py_ssize_t n = PySequence_Length(seq);
    if (n <= 0) return PyFloat_FromDouble(0.0);
    double acc = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(seq, i);
        double v = PyFloat_AsDouble(item);
        Py_DECREF(item);
        acc += v * v;
    }
    return PyFloat_FromDouble(sqrt(acc / (double)n + DEMO_EPSILON));
}

static PyObject *compiler(PyObject *self, PyObject *args) { return PyUnicode_FromString(DEMO_COMPILER); }

static PyMethodDef methods[] = {
    {"rms_norm", rms_norm, METH_VARARGS, "root mean square of a sequence"},
    {"compiler", compiler, METH_NOARGS, "the oneAPI compiler version seen at build time"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
