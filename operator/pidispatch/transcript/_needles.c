/* The compaction pre-filter's search (transcript/compaction.py), in C so a staged copy can afford it.
 *
 * first(buffer, start, end) -> the offset of the first `"compaction"` or `\u00` + `6`/`7` that lies
 * wholly inside buffer[start:end], or -1. Exactly what compaction.py's pure-Python fallback returns
 * (bytes.find plus a regular expression, two passes at about 3 GB/s each); here glibc's memmem finds
 * the first needle and memchr walks the backslashes before it, with the GIL released, so another
 * thread can write the chunk to disk while this one reads it. Offsets are non-negative; `end` is
 * clamped to the buffer's length.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <Python.h>
#include <string.h>

static const char NEEDLE[] = "\"compaction\"";
#define NEEDLE_LEN ((Py_ssize_t)(sizeof(NEEDLE) - 1))
#define ESCAPE_LEN 5 /* \ u 0 0 [67] */

static Py_ssize_t
first_hit(const char *data, Py_ssize_t start, Py_ssize_t end)
{
    const char *stop = data + end;
    const char *needle = memmem(data + start, (size_t)(end - start), NEEDLE, (size_t)NEEDLE_LEN);
    /* Only an escape that starts before the needle can come first. */
    const char *limit = needle != NULL ? needle : stop;
    for (const char *p = data + start; p < limit; p++) {
        p = memchr(p, '\\', (size_t)(limit - p));
        if (p == NULL)
            break;
        if (stop - p >= ESCAPE_LEN && p[1] == 'u' && p[2] == '0' && p[3] == '0' && (p[4] == '6' || p[4] == '7'))
            return p - data;
    }
    return needle != NULL ? needle - data : -1;
}

static PyObject *
needles_first(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, hit = -1;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nn:first", &view, &start, &end))
        return NULL;
    if (start < 0 || end < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "offsets must be non-negative");
        return NULL;
    }
    if (end > view.len)
        end = view.len;
    if (end - start >= ESCAPE_LEN) { /* neither needle fits in fewer bytes */
        Py_BEGIN_ALLOW_THREADS
        hit = first_hit((const char *)view.buf, start, end);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(hit);
}

static PyMethodDef methods[] = {
    {"first", needles_first, METH_VARARGS,
     "first(buffer, start, end) -> offset of the first '\"compaction\"' or '\\\\u00[67]' in buffer[start:end], or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_needles", "The compaction pre-filter's search, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__needles(void)
{
    return PyModule_Create(&module);
}
