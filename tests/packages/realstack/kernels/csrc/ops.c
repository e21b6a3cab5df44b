#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "scale.h"
#include "onednn_version.h"
#include "cutlass_revision.h"

static PyObject *scale(PyObject *self, PyObject *args) { return PyFloat_FromDouble(KERNEL_SCALE); }
static PyObject *onednn(PyObject *self, PyObject *args) { return PyUnicode_FromString(ONEDNN_VERSION); }
static PyObject *cutlass(PyObject *self, PyObject *args) { return PyUnicode_FromString(CUTLASS_REVISION); }
static PyObject *compiler(PyObject *self, PyObject *args) { return PyUnicode_FromString(REALSTACK_COMPILER); }

static PyMethodDef methods[] = {
    {"scale", scale, METH_NOARGS, "the kernels' scale"},
    {"onednn_version", onednn, METH_NOARGS, "the pre-fetched oneDNN header's version"},
    {"cutlass_revision", cutlass, METH_NOARGS, "the pre-fetched sycl-tla header's revision"},
    {"compiler", compiler, METH_NOARGS, "the oneAPI compiler version seen at build time"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
