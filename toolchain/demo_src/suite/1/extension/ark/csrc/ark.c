#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *target(PyObject *self, PyObject *args) { return PyUnicode_FromString(ARK_TARGET); }

static PyMethodDef methods[] = {{"target", target, METH_NOARGS, "the device target built for"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ark", NULL, -1, methods};
PyMODINIT_FUNC PyInit__ark(void) { return PyModule_Create(&module); }
