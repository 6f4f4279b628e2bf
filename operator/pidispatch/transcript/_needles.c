/* The compaction pre-filter's two searches (transcript/compaction.py), in C so a staged copy can afford them.
 *
 *   find_type(buffer, start, end)   -> offset of the first `"compaction"` wholly inside buffer[start:end], or -1
 *   find_escape(buffer, start, end) -> offset of the first `\u00` + `6`/`7` wholly inside buffer[start:end], or -1
 *
 * Exactly what compaction.py's pure-Python fallback returns (bytes.find and a regular expression, at
 * about 3 GB/s each); here glibc's memmem finds the first and memchr walks the backslashes for the
 * second, with the GIL released, so another thread can write the chunk to disk while one reads it.
 * Offsets are non-negative; `end` is clamped to the buffer's length.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <Python.h>
#include <string.h>

static const char TYPE[] = "\"compaction\"";
#define TYPE_LEN ((Py_ssize_t)(sizeof(TYPE) - 1))
#define ESCAPE_LEN 5 /* \ u 0 0 [67] */

static Py_ssize_t
find_type(const char *data, Py_ssize_t start, Py_ssize_t end)
{
    const char *hit = memmem(data + start, (size_t)(end - start), TYPE, (size_t)TYPE_LEN);
    return hit != NULL ? hit - data : -1;
}

static Py_ssize_t
find_escape(const char *data, Py_ssize_t start, Py_ssize_t end)
{
    const char *stop = data + end;
    for (const char *p = data + start; stop - p >= ESCAPE_LEN; p++) {
        p = memchr(p, '\\', (size_t)(stop - p - (ESCAPE_LEN - 1)));
        if (p == NULL)
            break;
        if (p[1] == 'u' && p[2] == '0' && p[3] == '0' && (p[4] == '6' || p[4] == '7'))
            return p - data;
    }
    return -1;
}

typedef Py_ssize_t (*search_fn)(const char *, Py_ssize_t, Py_ssize_t);

static PyObject *
run(PyObject *args, const char *format, search_fn search, Py_ssize_t needle_len)
{
    Py_buffer view;
    Py_ssize_t start, end, hit = -1;
    if (!PyArg_ParseTuple(args, format, &view, &start, &end))
        return NULL;
    if (start < 0 || end < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "offsets must be non-negative");
        return NULL;
    }
    if (end > view.len)
        end = view.len;
    if (end - start >= needle_len) {
        Py_BEGIN_ALLOW_THREADS
        hit = search((const char *)view.buf, start, end);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(hit);
}

static PyObject *
needles_find_type(PyObject *module, PyObject *args)
{
    (void)module;
    return run(args, "y*nn:find_type", find_type, TYPE_LEN);
}

static PyObject *
needles_find_escape(PyObject *module, PyObject *args)
{
    (void)module;
    return run(args, "y*nn:find_escape", find_escape, ESCAPE_LEN);
}

static PyMethodDef methods[] = {
    {"find_type", needles_find_type, METH_VARARGS,
     "find_type(buffer, start, end) -> offset of the first '\"compaction\"' in buffer[start:end], or -1"},
    {"find_escape", needles_find_escape, METH_VARARGS,
     "find_escape(buffer, start, end) -> offset of the first '\\\\u00' + '6' or '7' in buffer[start:end], or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_needles", "The compaction pre-filter's searches, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__needles(void)
{
    return PyModule_Create(&module);
}
