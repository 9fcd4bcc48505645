/* msgpack as msgpack-python's Packer(use_bin_type=True) writes it, for the producer's records:
 * shared by log/_codec.c (pack_batch, pack_record) and client/_sendpath.c (send() packs its
 * record straight into the open batch). Include after Python.h.
 *
 * Each mp_put_* writes at p and returns the number of bytes; with p == NULL it only returns
 * that number (the caller sizes its buffer with the same function that fills it).
 * mp_put_record appends one wire record [offset_delta, timestamp_delta, key, value, headers]
 * to a producer batch's packed records (a bytearray used as a buffer: its first `used` bytes
 * are records, the rest is room; it doubles when full). */
#ifndef RAFKA_MSGPACK_PUT_H
#define RAFKA_MSGPACK_PUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void mp_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

/* a header byte and an n-byte big-endian field */
static inline size_t mp_tag(uint8_t *p, uint8_t tag, uint64_t v, int n)
{
    if (p != NULL) { p[0] = tag; mp_be(p + 1, v, n); }
    return 1 + (size_t)n;
}

/* a signed 64-bit int (msgpack-python: negative fixint / int8..64, positive fixint / uint8..64) */
static inline size_t mp_put_int(uint8_t *p, long long d)
{
    if (d < -(1LL << 5)) {
        if (d < -(1LL << 31)) return mp_tag(p, 0xd3, (uint64_t)d, 8);
        if (d < -(1LL << 15)) return mp_tag(p, 0xd2, (uint32_t)d, 4);
        if (d < -(1LL << 7)) return mp_tag(p, 0xd1, (uint16_t)d, 2);
        return mp_tag(p, 0xd0, (uint8_t)d, 1);
    }
    if (d < (1LL << 7)) {
        if (p != NULL) p[0] = (uint8_t)d;
        return 1;
    }
    if (d < (1LL << 8)) return mp_tag(p, 0xcc, (uint64_t)d, 1);
    if (d < (1LL << 16)) return mp_tag(p, 0xcd, (uint64_t)d, 2);
    if (d < (1LL << 32)) return mp_tag(p, 0xce, (uint64_t)d, 4);
    return mp_tag(p, 0xcf, (uint64_t)d, 8);
}

/* the header of a str (is_str) or bin of n bytes, n < 2**32 */
static inline size_t mp_put_raw_header(uint8_t *p, uint64_t n, int is_str)
{
    if (is_str) {
        if (n < 32) {
            if (p != NULL) p[0] = (uint8_t)(0xa0 | n);
            return 1;
        }
        if (n < 256) return mp_tag(p, 0xd9, n, 1);
        if (n < 65536) return mp_tag(p, 0xda, n, 2);
        return mp_tag(p, 0xdb, n, 4);
    }
    if (n < 256) return mp_tag(p, 0xc4, n, 1);
    if (n < 65536) return mp_tag(p, 0xc5, n, 2);
    return mp_tag(p, 0xc6, n, 4);
}

/* the header of an array of n items, n < 2**32 */
static inline size_t mp_put_array_header(uint8_t *p, uint64_t n)
{
    if (n < 16) {
        if (p != NULL) p[0] = (uint8_t)(0x90 | n);
        return 1;
    }
    if (n < 65536) return mp_tag(p, 0xdc, n, 2);
    return mp_tag(p, 0xdd, n, 4);
}

/* the packed size of a header's str or a bytes (-1: neither, or a str that is not UTF-8) */
static inline Py_ssize_t mp_text(PyObject *o, const char **data, int *is_str)
{
    Py_ssize_t n;
    if (PyBytes_CheckExact(o)) {
        *data = PyBytes_AS_STRING(o);
        *is_str = 0;
        return PyBytes_GET_SIZE(o);
    }
    if (!PyUnicode_CheckExact(o)) return -1;
    *data = PyUnicode_AsUTF8AndSize(o, &n);  /* cached in the str: no GC-tracked object */
    if (*data == NULL) {
        PyErr_Clear();
        return -1;
    }
    *is_str = 1;
    return n;
}

/* Append [index, dt, key, value, headers] at ba[used:] for key / value bytes or None and
 * headers an empty or a list / tuple of (str, bytes) tuples. Returns the new used length;
 * -1 with an exception set (no memory, or ba has exports); -2 with none when an item is
 * outside that subset (nothing written). Runs no Python code and makes no GC-tracked object. */
static Py_ssize_t mp_put_record(PyObject *ba, Py_ssize_t used, long long index, long long dt,
                                PyObject *key, PyObject *value, PyObject *headers)
{
    PyObject *kv[2] = {key, value};
    Py_ssize_t nh = 0, i;
    size_t need = 1 + mp_put_int(NULL, index) + mp_put_int(NULL, dt);
    for (i = 0; i < 2; i++) {
        if (kv[i] == Py_None) need += 1;
        else if (PyBytes_CheckExact(kv[i]))
            need += mp_put_raw_header(NULL, (uint64_t)PyBytes_GET_SIZE(kv[i]), 0)
                    + (size_t)PyBytes_GET_SIZE(kv[i]);
        else return -2;
    }
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers)) return -2;
    nh = PySequence_Fast_GET_SIZE(headers);
    PyObject **hs = PySequence_Fast_ITEMS(headers);
    need += mp_put_array_header(NULL, (uint64_t)nh);
    for (i = 0; i < nh; i++) {
        PyObject *h = hs[i];
        const char *d;
        int is_str;
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 2) return -2;
        for (int j = 0; j < 2; j++) {
            Py_ssize_t n = mp_text(PyTuple_GET_ITEM(h, j), &d, &is_str);
            if (n < 0 || is_str != (j == 0) || (uint64_t)n > 0xffffffffULL) return -2;
            need += mp_put_raw_header(NULL, (uint64_t)n, is_str) + (size_t)n;
        }
        need += 1;
    }
    if (!PyByteArray_CheckExact(ba) || used < 0 || used > PyByteArray_GET_SIZE(ba)) return -2;
    Py_ssize_t cap = PyByteArray_GET_SIZE(ba);
    if ((size_t)(cap - used) < need) {
        Py_ssize_t want = cap < 4096 ? 4096 : cap * 2;
        if ((size_t)(want - used) < need) want = used + (Py_ssize_t)need;
        if (PyByteArray_Resize(ba, want) < 0) return -1;
    }
    uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(ba) + used, *start = p;
    p += mp_put_array_header(p, 5);
    p += mp_put_int(p, index);
    p += mp_put_int(p, dt);
    for (i = 0; i < 2; i++) {
        if (kv[i] == Py_None) {
            *p++ = 0xc0;
        } else {
            Py_ssize_t n = PyBytes_GET_SIZE(kv[i]);
            p += mp_put_raw_header(p, (uint64_t)n, 0);
            memcpy(p, PyBytes_AS_STRING(kv[i]), (size_t)n);
            p += n;
        }
    }
    p += mp_put_array_header(p, (uint64_t)nh);
    for (i = 0; i < nh; i++) {
        *p++ = 0x92;
        for (int j = 0; j < 2; j++) {
            const char *d = NULL;
            int is_str = 0;
            Py_ssize_t n = mp_text(PyTuple_GET_ITEM(hs[i], j), &d, &is_str);
            p += mp_put_raw_header(p, (uint64_t)n, is_str);
            memcpy(p, d, (size_t)n);
            p += n;
        }
    }
    return used + (Py_ssize_t)(p - start);
}

#endif
