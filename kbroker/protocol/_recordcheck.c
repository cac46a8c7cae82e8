/*
 * kbroker.protocol._recordcheck: the structural check of the records inside one magic-2 record batch,
 * compiled so that checking every record of every produced batch costs a few milliseconds per GB instead of
 * seconds. kbroker/protocol/record_check.py holds the same check in Python (used when this module was not
 * built) and tests/protocol/test_record_check.py checks with Hypothesis that both give the same answer.
 *
 * check_records(data, count) -> None | (index, message)
 *   data:  the batch's records, uncompressed (bytes-like, the bytes after the 61-byte batch header)
 *   count: the batch header's record count
 * Returns None when data holds exactly `count` well-formed records whose offset deltas run 0, 1, 2, ...;
 * otherwise the index of the first bad record (-1 when the fault is not one record's: bytes left over after
 * the last record) and a message. The rules are those of the record format in the protocol guide
 * (../shared/kafka-protocol, "Record"): length varint, attributes int8, timestampDelta varlong,
 * offsetDelta varint, key and value (varint length, negative = null), header count varint (>= 0), headers
 * (key length varint >= 0 and key bytes, value length varint, negative = null), and the fields must use
 * exactly the record's declared length. Varints are zig-zag, at most 5 bytes (varint) or 10 (varlong).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
    int err; /* 0 ok, 1 ran past end, 2 varint too long */
} cursor;

static inline uint64_t read_unsigned(cursor *c, int max_bytes) {
    if (c->p < c->end && *c->p < 0x80)  /* the common case: one byte */
        return *c->p++;
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->p >= c->end) {
            c->err = 1;
            return 0;
        }
        unsigned char b = *c->p++;
        if (shift < 64)
            result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            return result;
        shift += 7;
    }
    c->err = 2;
    return 0;
}

static inline int64_t read_varint(cursor *c) {
    uint32_t raw = (uint32_t)read_unsigned(c, 5);
    return (int64_t)(int32_t)((raw >> 1) ^ (uint32_t)(-(int32_t)(raw & 1)));
}

static inline void read_varlong(cursor *c) {
    (void)read_unsigned(c, 10);
}

static inline int skip(cursor *c, int64_t n) {
    if (n > c->end - c->p) {
        c->err = 1;
        return 0;
    }
    c->p += n;
    return 1;
}

static PyObject *fault(Py_ssize_t index, PyObject *message) {
    if (message == NULL)
        return NULL;
    PyObject *t = Py_BuildValue("(nN)", index, message);
    return t;
}

static PyObject *structure_fault(Py_ssize_t index, cursor *c, int64_t length) {
    if (c->err == 2)
        return fault(index, PyUnicode_FromFormat("Found invalid record structure: record %zd has a varint "
                                                 "longer than its type allows", index));
    return fault(index, PyUnicode_FromFormat("Found invalid record structure: the fields of record %zd run "
                                             "past its length of %lld bytes", index, (long long)length));
}

static PyObject *check_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n:check_records", &view, &count))
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    const unsigned char *end = p + view.len;
    PyObject *result = NULL;
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        if (p >= end) {
            result = fault(i, PyUnicode_FromFormat("The batch declares %zd records but holds only %zd", count, i));
            goto done;
        }
        cursor outer = {p, end, 0};
        int64_t length = read_varint(&outer);
        if (outer.err) {
            result = fault(i, PyUnicode_FromFormat("Found invalid record structure: the length of record %zd "
                                                   "is not a valid varint", i));
            goto done;
        }
        if (length < 0 || length > end - outer.p) {
            result = fault(i, PyUnicode_FromFormat("Invalid record size: record %zd declares %lld bytes but the "
                                                   "batch has only %zd remaining bytes", i, (long long)length,
                                                   (Py_ssize_t)(end - outer.p)));
            goto done;
        }
        cursor c = {outer.p, outer.p + length, 0};
        if (!skip(&c, 1)) { /* attributes */
            result = structure_fault(i, &c, length);
            goto done;
        }
        read_varlong(&c); /* timestampDelta */
        int64_t offset_delta = c.err ? 0 : read_varint(&c);
        if (c.err) {
            result = structure_fault(i, &c, length);
            goto done;
        }
        if (offset_delta != i) {
            result = fault(i, PyUnicode_FromFormat("Record %zd has offset delta %lld; the offset deltas of a "
                                                   "batch must run 0, 1, 2, ...", i, (long long)offset_delta));
            goto done;
        }
        int64_t key_length = read_varint(&c);
        if (!c.err && key_length > 0)
            skip(&c, key_length);
        int64_t value_length = c.err ? 0 : read_varint(&c);
        if (!c.err && value_length > 0)
            skip(&c, value_length);
        int64_t header_count = c.err ? 0 : read_varint(&c);
        if (c.err) {
            result = structure_fault(i, &c, length);
            goto done;
        }
        if (header_count < 0) {
            result = fault(i, PyUnicode_FromFormat("Found invalid number of record headers %lld in record %zd",
                                                   (long long)header_count, i));
            goto done;
        }
        for (int64_t h = 0; h < header_count; h++) {
            int64_t hkey_length = read_varint(&c);
            if (c.err)
                break;
            if (hkey_length < 0) {
                result = fault(i, PyUnicode_FromFormat("Invalid negative header key size %lld in record %zd",
                                                       (long long)hkey_length, i));
                goto done;
            }
            if (!skip(&c, hkey_length))
                break;
            int64_t hvalue_length = read_varint(&c);
            if (!c.err && hvalue_length > 0)
                skip(&c, hvalue_length);
            if (c.err)
                break;
        }
        if (c.err) {
            result = structure_fault(i, &c, length);
            goto done;
        }
        if (c.p != c.end) {
            result = fault(i, PyUnicode_FromFormat("Invalid record size: expected to read %lld bytes in record "
                                                   "%zd, but instead read %lld", (long long)length, i,
                                                   (long long)(length - (c.end - c.p))));
            goto done;
        }
        p = c.end;
    }
    if (p != end) {
        result = fault(-1, PyUnicode_FromFormat("Incorrect declared batch size, %zd bytes remain after the %zd "
                                                "declared records", (Py_ssize_t)(end - p), count));
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(data, count) -> None | (index, message): the structure of a batch's uncompressed records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordcheck", "Record structure check (C version of record_check.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__recordcheck(void) {
    return PyModule_Create(&module);
}
