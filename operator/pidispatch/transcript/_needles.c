/* The compaction pre-filter's two searches (transcript/compaction.py), in C so a staged copy can afford them.
 *
 *   find_type(buffer, start, end)   -> offset of the first `"compaction"` wholly inside buffer[start:end], or -1
 *   find_escape(buffer, start, end) -> offset of the first `\u00` + `6`/`7` wholly inside buffer[start:end], or -1
 *
 * Exactly what compaction.py's pure-Python fallback returns (bytes.find and a regular expression, at
 * about 3 GB/s each); here glibc's memmem finds the first and memchr walks the backslashes for the
 * second, with the GIL released, so another thread can write the chunk to disk while one reads it.
 * Offsets are non-negative; `end` is clamped to the buffer's length.
 *
 *   clears(buffer, start, end)      -> True when the line buffer[start:end] surely holds no `compaction`
 *                                      entry with an empty summary, so gate 12 need not parse it
 *   first_unclear(buffer, start, end) -> where the first line of buffer[start:end] (split on newlines)
 *                                      starts that holds a needle and that `clears` does not clear, or -1
 *
 * `clears` answers True only when compaction.py's full judgment (decode, JSON.parse-exact parse,
 * `compaction_summary_is_empty`) would answer "not empty"; False means "parse it", never "empty".
 * Why that is sound is argued at `clears_line` below, and a property test holds it to the full judgment.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, memrchr */
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

/* Deeper lines are left to the parser: Python's JSON parser gives up on nesting near its recursion
 * limit, and gate 12 fails closed on such a line (compaction.py); far below that, this answers exactly. */
#define MAX_DEPTH 64

/* The last value seen for one top-level key: JSON.parse and Python's json both keep the last duplicate. */
struct member {
    int seen;     /* the key occurred */
    int string;   /* its value is a string; then [start, end) are the string's raw bytes */
    int escaped;  /* that string holds an escape */
    Py_ssize_t start, end;
};

/* Whether the full judgment of this line surely answers "no empty compaction summary".
 *
 * The full judgment answers "empty" only for a line that parses as JSON to an object whose `type` is
 * "compaction" and whose `summary` is missing, not a string, or blank once pi's boilerplate is removed;
 * or for a line nested too deeply for Python to parse (fail closed). Every other line, including every
 * line that is not valid JSON, is "not empty". So:
 *
 *  - Nesting deeper than MAX_DEPTH anywhere: not cleared (the parser, and its depth rule, decide).
 *  - The walk below follows strings (with their escapes) and brackets as a JSON parser does, so on a
 *    valid line it finds the top-level object's keys and their last values exactly. On an invalid line
 *    it may be wrong, but any answer is right there: the parser answers "not empty" (and the depth it
 *    reaches before failing lies in a valid-so-far prefix, which this walk counts exactly).
 *  - A top-level key spelled with an escape might decode to `type` or `summary`: not cleared.
 *  - A bracket left open, or anything but whitespace beside a top-level object: not JSON, cleared.
 *  - No top-level object: cleared.
 *  - `type` missing, not a string, or a string without escapes other than `compaction`: not a
 *    compaction entry, cleared. (An escaped one might decode to "compaction": judged by its summary.)
 *  - `summary` missing or not a string: not cleared.
 *  - A string summary S is cleared when its raw bytes hold no `\u` escape and not `Turn Context`, and
 *    its first byte is printable ASCII other than `\`, `"` and `N`. Then S[0] is that very character;
 *    S does not contain the split-turn marker (its letters and spaces could only be escaped as `\u`);
 *    every file-list block that rule 1 may cut starts with a newline, so at an offset >= 1; and the
 *    placeholder `No prior history.` starts with `N`, so no removal reaches S[0]. What is left starts
 *    with a character that is not whitespace: not blank.
 */
static int
clears_line(const unsigned char *p, Py_ssize_t n)
{
    struct member type = {0, 0, 0, 0, 0}, summary = {0, 0, 0, 0, 0};
    struct member *key = NULL, *value = NULL; /* the member the last key names; the one awaiting its value */
    Py_ssize_t i = 0, s, e, len;
    int depth = 0, values = 0, top_object = 0, expect_key = 0, escaped_key = 0, escaped;
    unsigned char c;

    while (i < n) {
        c = p[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            i++;
            continue;
        }
        if (value != NULL) { /* the first byte of a value at depth 1 */
            value->seen = 1;
            value->string = c == '"';
            if (!value->string) value = NULL;
        }
        if (c == '"') {
            s = ++i;
            escaped = 0;
            while (i < n && p[i] != '"') {
                if (p[i] == '\\') {
                    escaped = 1;
                    i++;
                }
                i++;
            }
            if (i >= n)
                return 1; /* an unterminated string: not JSON */
            e = i++;
            if (depth == 0)
                values++;
            if (value != NULL) {
                value->start = s, value->end = e, value->escaped = escaped;
                value = NULL;
            }
            else if (depth == 1 && top_object && expect_key) {
                expect_key = 0;
                escaped_key |= escaped;
                len = e - s;
                key = len == 4 && memcmp(p + s, "type", 4) == 0      ? &type
                      : len == 7 && memcmp(p + s, "summary", 7) == 0 ? &summary
                                                                      : NULL;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            if (++depth > MAX_DEPTH)
                return 0;
            if (depth == 1 && values++ == 0) {
                top_object = c == '{';
                expect_key = top_object;
            }
        }
        else if (c == '}' || c == ']') {
            if (--depth < 0)
                return 1; /* a closer with nothing open: not JSON */
        }
        else if (depth == 1 && top_object) {
            if (c == ',') {
                expect_key = 1;
            }
            else if (c == ':') {
                value = key;
                key = NULL;
            }
        }
        else if (depth == 0) {
            values++;
        }
        i++;
    }
    if (depth != 0 || (top_object && values != 1))
        return 1; /* left open, or more than the object: not JSON */
    if (escaped_key)
        return 0;
    if (!top_object)
        return 1;
    if (!type.seen || !type.string)
        return 1;
    if (!type.escaped && !(type.end - type.start == 10 && memcmp(p + type.start, "compaction", 10) == 0))
        return 1;
    if (!summary.seen || !summary.string || summary.end == summary.start)
        return 0;
    c = p[summary.start];
    if (c < 0x21 || c > 0x7e || c == '\\' || c == '"' || c == 'N')
        return 0;
    len = summary.end - summary.start;
    if (memmem(p + summary.start, (size_t)len, "\\u", 2) != NULL ||
        memmem(p + summary.start, (size_t)len, "Turn Context", 12) != NULL)
        return 0;
    return 1;
}

/* `clears_line` over the candidate lines of data[start:end], as compaction.py's `_scan_whole_lines`
 * walks them, up to the first it does not clear: where that line starts, or -1 when it clears them all.
 * Each needle's next offset is kept until the walk passes it, so each is searched for once over the
 * range however many lines hold one. */
static Py_ssize_t
first_unclear(const char *data, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t type = find_type(data, start, end), escape = find_escape(data, start, end);
    Py_ssize_t hit, line_start, line_end;
    const char *newline;
    while (type >= 0 || escape >= 0) {
        hit = escape < 0 || (type >= 0 && type < escape) ? type : escape;
        newline = memrchr(data + start, '\n', (size_t)(hit - start));
        line_start = newline != NULL ? newline - data + 1 : start;
        newline = memchr(data + hit, '\n', (size_t)(end - hit));
        line_end = newline != NULL ? newline - data : end;
        if (!clears_line((const unsigned char *)data + line_start, line_end - line_start))
            return line_start;
        start = line_end + 1;
        if (start >= end)
            break;
        if (type >= 0 && type < start)
            type = find_type(data, start, end);
        if (escape >= 0 && escape < start)
            escape = find_escape(data, start, end);
    }
    return -1;
}

typedef Py_ssize_t (*search_fn)(const char *, Py_ssize_t, Py_ssize_t);

/* Parses (buffer, start, end), refuses negative offsets and clamps `end` to the buffer; 0 on success,
 * -1 with an exception set (the buffer then already released). */
static int
parse_range(PyObject *args, const char *format, Py_buffer *view, Py_ssize_t *start, Py_ssize_t *end)
{
    if (!PyArg_ParseTuple(args, format, view, start, end))
        return -1;
    if (*start < 0 || *end < 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "offsets must be non-negative");
        return -1;
    }
    if (*end > view->len)
        *end = view->len;
    return 0;
}

static PyObject *
run(PyObject *args, const char *format, search_fn search, Py_ssize_t needle_len)
{
    Py_buffer view;
    Py_ssize_t start, end, hit = -1;
    if (parse_range(args, format, &view, &start, &end) < 0)
        return NULL;
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

static PyObject *
needles_clears(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end;
    int cleared = 0;
    (void)module;
    if (parse_range(args, "y*nn:clears", &view, &start, &end) < 0)
        return NULL;
    if (start < end) {
        Py_BEGIN_ALLOW_THREADS
        cleared = clears_line((const unsigned char *)view.buf + start, end - start);
        Py_END_ALLOW_THREADS
    }
    else {
        cleared = 1; /* an empty line is not JSON */
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(cleared);
}

static PyObject *
needles_first_unclear(PyObject *module, PyObject *args)
{
    (void)module;
    return run(args, "y*nn:first_unclear", first_unclear, 1);
}

static PyMethodDef methods[] = {
    {"find_type", needles_find_type, METH_VARARGS,
     "find_type(buffer, start, end) -> offset of the first '\"compaction\"' in buffer[start:end], or -1"},
    {"find_escape", needles_find_escape, METH_VARARGS,
     "find_escape(buffer, start, end) -> offset of the first '\\\\u00' + '6' or '7' in buffer[start:end], or -1"},
    {"clears", needles_clears, METH_VARARGS,
     "clears(buffer, start, end) -> True when the line buffer[start:end] surely holds no compaction entry "
     "with an empty summary (False: parse it)"},
    {"first_unclear", needles_first_unclear, METH_VARARGS,
     "first_unclear(buffer, start, end) -> where the first line of buffer[start:end] holding a needle that "
     "clears() does not clear starts, or -1"},
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
