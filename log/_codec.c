/* rafka.log._codec — the optional C accelerator of the record codec (issue 13).
 *
 * Theory of operation
 * -------------------
 * A batch's records section (log/batch.py, after lz4 decompression) is one msgpack array of
 * [offset_delta, timestamp_delta, key, value, headers] records. This module reads and writes
 * exactly that subset of msgpack, with bounds checks on every read:
 *
 *   decode_columns(section, count, base_offset, first_timestamp, timestamp_type, max_timestamp)
 *       -> (offsets, timestamps, key_validity, key_offsets, key_data,
 *           value_validity, value_offsets, value_data, headers)
 *     one pass over the section, no Python object per record: offsets (base + delta) and
 *     timestamps (first + delta, or max_timestamp for LogAppendTime) as native int64 buffers,
 *     keys and values as Arrow binary columns (int32 offsets, one data buffer, an LSB-first
 *     validity bitmap or None when nothing is null), headers None when every record has none
 *     (else a list, one tuple of tuples per record, as msgpack's use_list=False gives).
 *   decode_records(section, count, base_offset, first_timestamp, timestamp_type, max_timestamp,
 *                  topic, partition, cls) -> [cls(...), ...]
 *     the consumer's record objects (ConsumerRecord, a tuple subclass) made straight from the
 *     section, without the intermediate row tuple; untracked by the GC when all atoms.
 *   pack_batch(rows, segments, packed=b'', packed_count=0) -> bytes
 *     the same bytes as msgpack.Packer(use_bin_type=True).pack(prefix + rows + every
 *     segment's rows), where `packed` holds `packed_count` records already packed in order
 *     (a producer batch's send() records: pack_record here, client/_sendpath.c in C)
 *     for rows of None, bool, int, str, bytes/bytearray and lists/tuples of them (what the
 *     producer's wire rows hold), without building the segments' row tuples: a segment
 *     (first_index, ts_delta, keys, values, headers, a, k) is a run of send_batch's records
 *     kept as slices of its lists (log.batch.segment_rows).
 *   kafka_section(section, count) -> bytes
 *     a msgpack records section as an uncompressed Kafka v2 records section of the same
 *     records (a Kafka reader of a natively written batch: broker/kafka/records.py).
 *   murmur2(key) -> int, plan(keys, values, num_partitions, sticky) -> groups
 *     Kafka's murmur2 (bit for bit the Python one in client/partitioner.py) and send_batch's
 *     per-record planning: sizes, partitions, the stable grouping by partition.
 *
 * Both decoders take a last optional argument `kafka`: the section is then a Kafka v2 records
 * section (varint records, see "Kafka v2 records" below: a batch stored as a Kafka client
 * produced it, log/batch.py), decoded to the same results.
 *
 * Anything outside that subset (a str key, a float, a map, bad UTF-8, truncated or trailing
 * bytes, a count that does not match) raises Unsupported and the caller runs the pure-Python
 * path on the same input, which produces the result or the named error it always did. So the
 * two paths cannot disagree: C either gives the identical answer or defers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_msgpack_put.h"  /* header choices, shared with client/_sendpath.c */

static PyObject *Unsupported;

/* ------------------------------------------------------------------ reading */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} rd_t;

static int fail(const char *what)
{
    PyErr_SetString(Unsupported, what);
    return -1;
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

#define NEED(r, n) do { if ((size_t)((r)->end - (r)->p) < (size_t)(n)) return fail("truncated"); } while (0)

static int read_array(rd_t *r, Py_ssize_t *n)
{
    NEED(r, 1);
    uint8_t b = *r->p;
    if ((b & 0xf0) == 0x90) { *n = b & 0x0f; r->p += 1; return 0; }
    if (b == 0xdc) { NEED(r, 3); *n = be16(r->p + 1); r->p += 3; return 0; }
    if (b == 0xdd) { NEED(r, 5); *n = (Py_ssize_t)be32(r->p + 1); r->p += 5; return 0; }
    return fail("not an array");
}

static int read_int(rd_t *r, int64_t *v)
{
    NEED(r, 1);
    uint8_t b = *r->p;
    if (b <= 0x7f) { *v = b; r->p += 1; return 0; }
    if (b >= 0xe0) { *v = (int8_t)b; r->p += 1; return 0; }
    switch (b) {
    case 0xcc: NEED(r, 2); *v = r->p[1]; r->p += 2; return 0;
    case 0xcd: NEED(r, 3); *v = be16(r->p + 1); r->p += 3; return 0;
    case 0xce: NEED(r, 5); *v = be32(r->p + 1); r->p += 5; return 0;
    case 0xcf: {
        NEED(r, 9);
        uint64_t u = be64(r->p + 1);
        if (u > (uint64_t)INT64_MAX) return fail("uint64 out of range");
        *v = (int64_t)u; r->p += 9; return 0;
    }
    case 0xd0: NEED(r, 2); *v = (int8_t)r->p[1]; r->p += 2; return 0;
    case 0xd1: NEED(r, 3); *v = (int16_t)be16(r->p + 1); r->p += 3; return 0;
    case 0xd2: NEED(r, 5); *v = (int32_t)be32(r->p + 1); r->p += 5; return 0;
    case 0xd3: NEED(r, 9); *v = (int64_t)be64(r->p + 1); r->p += 9; return 0;
    }
    return fail("not an int");
}

/* bin or nil: *ptr NULL for nil */
static int read_bin(rd_t *r, const uint8_t **ptr, Py_ssize_t *len)
{
    NEED(r, 1);
    uint8_t b = *r->p;
    size_t n, h;
    if (b == 0xc0) { *ptr = NULL; *len = 0; r->p += 1; return 0; }
    if (b == 0xc4) { NEED(r, 2); n = r->p[1]; h = 2; }
    else if (b == 0xc5) { NEED(r, 3); n = be16(r->p + 1); h = 3; }
    else if (b == 0xc6) { NEED(r, 5); n = be32(r->p + 1); h = 5; }
    else return fail("not bin or nil");
    NEED(r, h + n);
    *ptr = r->p + h;
    *len = (Py_ssize_t)n;
    r->p += h + n;
    return 0;
}

/* one header field: str, bin, nil or int -> a new reference */
static PyObject *read_atom(rd_t *r)
{
    if (r->p >= r->end) { fail("truncated"); return NULL; }
    uint8_t b = *r->p;
    size_t n = 0, h = 0;
    if ((b & 0xe0) == 0xa0) { n = b & 0x1f; h = 1; }
    else if (b == 0xd9) { if (r->end - r->p < 2) { fail("truncated"); return NULL; } n = r->p[1]; h = 2; }
    else if (b == 0xda) { if (r->end - r->p < 3) { fail("truncated"); return NULL; } n = be16(r->p + 1); h = 3; }
    else if (b == 0xdb) { if (r->end - r->p < 5) { fail("truncated"); return NULL; } n = be32(r->p + 1); h = 5; }
    if (h) {
        if ((size_t)(r->end - r->p) < h + n) { fail("truncated"); return NULL; }
        PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p + h, (Py_ssize_t)n, "strict");
        if (s == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); fail("bad utf-8"); }
            return NULL;
        }
        r->p += h + n;
        return s;
    }
    if (b == 0xc0 || b == 0xc4 || b == 0xc5 || b == 0xc6) {
        const uint8_t *ptr;
        Py_ssize_t len;
        if (read_bin(r, &ptr, &len) < 0) return NULL;
        if (ptr == NULL) Py_RETURN_NONE;
        return PyBytes_FromStringAndSize((const char *)ptr, len);
    }
    int64_t v;
    if (read_int(r, &v) < 0) return NULL;
    return PyLong_FromLongLong(v);
}

/* headers: an array of arrays of atoms -> a tuple of tuples (the shared () when empty) */
static PyObject *read_headers(rd_t *r, PyObject *empty)
{
    Py_ssize_t n, m, i, j;
    if (read_array(r, &n) < 0) return NULL;
    if (n == 0) { Py_INCREF(empty); return empty; }
    if (n > r->end - r->p) { fail("truncated"); return NULL; }
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (i = 0; i < n; i++) {
        if (read_array(r, &m) < 0 || m > r->end - r->p) {
            if (!PyErr_Occurred()) fail("truncated");
            Py_DECREF(out);
            return NULL;
        }
        PyObject *t = PyTuple_New(m);
        if (t == NULL) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, t);
        for (j = 0; j < m; j++) {
            PyObject *a = read_atom(r);
            if (a == NULL) { Py_DECREF(out); return NULL; }
            PyTuple_SET_ITEM(t, j, a);
        }
    }
    return out;
}

/* the batch header's fields a record needs */
typedef struct {
    long long base, ts0, maxts;
    int tstype;
} batch_t;

/* the outer array: exactly `count` records, each at least 6 bytes */
static int read_section(rd_t *r, Py_ssize_t count)
{
    Py_ssize_t n;
    if (read_array(r, &n) < 0) return -1;
    if (n != count) return fail("record count mismatch");
    if (n > (r->end - r->p) / 6 + 1) return fail("truncated");
    return 0;
}

/* a record's array header, offset delta and timestamp delta -> its offset and timestamp */
static int read_record_head(rd_t *r, const batch_t *b, int64_t *off, int64_t *ts)
{
    Py_ssize_t fields;
    int64_t od, td;
    if (read_array(r, &fields) < 0) return -1;
    if (fields != 5) return fail("record is not 5 fields");
    if (read_int(r, &od) < 0 || read_int(r, &td) < 0) return -1;
    if (__builtin_add_overflow((int64_t)b->base, od, off)) return fail("offset overflow");
    if (b->tstype) { *ts = b->maxts; return 0; }
    if (__builtin_add_overflow((int64_t)b->ts0, td, ts)) return fail("timestamp overflow");
    return 0;
}


/* ------------------------------------------------------------------ Kafka v2 records */

/* A Kafka records section (log/kafka_section.py, after decompression): `count` records, each
 * varint length, int8 attributes, varint timestampDelta, varint offsetDelta, varint keyLength,
 * key, varint valueLength, value, varint headerCount, (varint keyLength, key, varint
 * valueLength, value)*; zig-zag varints, length -1 for null. decode_columns / decode_records
 * read it when called with kafka=True, giving what they give for the same records packed with
 * msgpack; anything else (a varint over 64 bits, a length below -1, a null header key, bad
 * UTF-8, a record whose fields do not fill its length, trailing bytes) is Unsupported, and
 * log/kafka_section.py's decode_rows names the error. */

static int kread_varint(rd_t *r, int64_t *v)
{
    uint64_t u = 0;
    int shift = 0;
    for (;;) {
        NEED(r, 1);
        uint8_t b = *r->p++;
        if (shift == 63 && b > 1) return fail("varint over 64 bits");
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (shift > 63) return fail("varint longer than 10 bytes");
    }
    *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return 0;
}

/* bytes or null (-1): *ptr NULL for null */
static int kread_bin(rd_t *r, const uint8_t **ptr, Py_ssize_t *len)
{
    int64_t n;
    if (kread_varint(r, &n) < 0) return -1;
    if (n == -1) { *ptr = NULL; *len = 0; return 0; }
    if (n < 0) return fail("negative length");
    NEED(r, n);
    *ptr = r->p;
    *len = (Py_ssize_t)n;
    r->p += n;
    return 0;
}

/* a record's length, attributes, timestamp delta and offset delta -> its offset and
 * timestamp; `rec` is set to the rest of the record, `r` moves past it */
static int kread_head(rd_t *r, const batch_t *b, int64_t *off, int64_t *ts, rd_t *rec)
{
    int64_t len, od, td;
    if (kread_varint(r, &len) < 0) return -1;
    if (len < 1) return fail("bad record length");
    NEED(r, len);
    rec->p = r->p;
    rec->end = r->p + len;
    r->p += len;
    rec->p += 1;  /* record attributes: unused */
    if (kread_varint(rec, &td) < 0 || kread_varint(rec, &od) < 0) return -1;
    if (__builtin_add_overflow((int64_t)b->base, od, off)) return fail("offset overflow");
    if (b->tstype) { *ts = b->maxts; return 0; }
    if (__builtin_add_overflow((int64_t)b->ts0, td, ts)) return fail("timestamp overflow");
    return 0;
}

/* headers -> a tuple of (str, bytes | None) tuples (the shared () when none); the record
 * must end there */
static PyObject *kread_headers(rd_t *rec, PyObject *empty)
{
    int64_t n;
    Py_ssize_t i;
    if (kread_varint(rec, &n) < 0) return NULL;
    if (n == 0) {
        if (rec->p != rec->end) { fail("record length does not match its fields"); return NULL; }
        Py_INCREF(empty);
        return empty;
    }
    if (n < 0 || n > (rec->end - rec->p) / 2) { fail("bad header count"); return NULL; }
    PyObject *out = PyTuple_New((Py_ssize_t)n);
    if (out == NULL) return NULL;
    for (i = 0; i < n; i++) {
        const uint8_t *kp, *vp;
        Py_ssize_t kl, vl;
        if (kread_bin(rec, &kp, &kl) < 0 || kread_bin(rec, &vp, &vl) < 0) goto bad;
        if (kp == NULL) { fail("null header key"); goto bad; }
        PyObject *k = PyUnicode_DecodeUTF8((const char *)kp, kl, "strict");
        if (k == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); fail("bad utf-8"); }
            goto bad;
        }
        PyObject *v;
        if (vp == NULL) { v = Py_None; Py_INCREF(v); }
        else if ((v = PyBytes_FromStringAndSize((const char *)vp, vl)) == NULL) { Py_DECREF(k); goto bad; }
        PyObject *t = PyTuple_Pack(2, k, v);
        Py_DECREF(k);
        Py_DECREF(v);
        if (t == NULL) goto bad;
        PyTuple_SET_ITEM(out, i, t);
    }
    if (rec->p != rec->end) { fail("record length does not match its fields"); goto bad; }
    return out;
bad:
    Py_DECREF(out);
    return NULL;
}

/* the section holds at least `count` records of at least 7 bytes each */
static int kread_section(rd_t *r, Py_ssize_t count)
{
    if (count < 0 || count > (r->end - r->p) / 7) return fail("record count mismatch");
    return 0;
}

/* ------------------------------------------------------------------ decode_columns */

static PyObject *decode_columns(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count, n, i;
    batch_t b;
    PyObject *od = NULL, *td = NULL, *kvalid = NULL, *koffs = NULL, *kdata = NULL;
    PyObject *vvalid = NULL, *voffs = NULL, *vdata = NULL, *headers = NULL, *empty = NULL;
    PyObject *result = NULL;
    const uint8_t **spans = NULL;
    int kafka = 0;
    if (!PyArg_ParseTuple(args, "y*nLLiL|p:decode_columns", &buf, &count, &b.base, &b.ts0,
                          &b.tstype, &b.maxts, &kafka))
        return NULL;
    rd_t r = {(const uint8_t *)buf.buf, (const uint8_t *)buf.buf + buf.len};
    if (buf.len > INT32_MAX || count < 0) { fail("section too large"); goto done; }
    if ((kafka ? kread_section(&r, count) : read_section(&r, count)) < 0) goto done;
    n = count;
    Py_ssize_t bitmap = (n + 7) / 8;
    od = PyBytes_FromStringAndSize(NULL, n * 8);
    td = PyBytes_FromStringAndSize(NULL, n * 8);
    koffs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    voffs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    kvalid = PyBytes_FromStringAndSize(NULL, bitmap);
    vvalid = PyBytes_FromStringAndSize(NULL, bitmap);
    empty = PyTuple_New(0);
    /* where each key and value lies in the section: copied once their total size is known */
    spans = PyMem_Malloc(sizeof(const uint8_t *) * 2 * (n ? n : 1));
    if (!od || !td || !koffs || !voffs || !kvalid || !vvalid || !empty) goto done;
    if (spans == NULL) { PyErr_NoMemory(); goto done; }
    int64_t *odp = (int64_t *)PyBytes_AS_STRING(od), *tdp = (int64_t *)PyBytes_AS_STRING(td);
    int32_t *kop = (int32_t *)PyBytes_AS_STRING(koffs), *vop = (int32_t *)PyBytes_AS_STRING(voffs);
    uint8_t *kvp = (uint8_t *)PyBytes_AS_STRING(kvalid), *vvp = (uint8_t *)PyBytes_AS_STRING(vvalid);
    memset(kvp, 0, bitmap);
    memset(vvp, 0, bitmap);
    int32_t kpos = 0, vpos = 0;
    int knull = 0, vnull = 0;
    kop[0] = 0;
    vop[0] = 0;
    for (i = 0; i < n; i++) {
        Py_ssize_t len;
        const uint8_t *ptr;
        rd_t rec;
        rd_t *rr = kafka ? &rec : &r;  /* a Kafka record is read within its own length */
        if ((kafka ? kread_head(&r, &b, &odp[i], &tdp[i], &rec)
                   : read_record_head(&r, &b, &odp[i], &tdp[i])) < 0) goto done;
        if ((kafka ? kread_bin(rr, &ptr, &len) : read_bin(rr, &ptr, &len)) < 0) goto done;
        spans[2 * i] = ptr;
        if (ptr) { kpos += (int32_t)len; kvp[i >> 3] |= 1 << (i & 7); }
        else knull = 1;
        kop[i + 1] = kpos;
        if ((kafka ? kread_bin(rr, &ptr, &len) : read_bin(rr, &ptr, &len)) < 0) goto done;
        spans[2 * i + 1] = ptr;
        if (ptr) { vpos += (int32_t)len; vvp[i >> 3] |= 1 << (i & 7); }
        else vnull = 1;
        vop[i + 1] = vpos;
        if (kafka ? (rec.end - rec.p == 1 && *rec.p == 0) : (r.p < r.end && *r.p == 0x90)) {
            rr->p++;  /* no headers: the usual case */
            if (headers && PyList_Append(headers, empty) < 0) goto done;
            continue;
        }
        PyObject *h = kafka ? kread_headers(rr, empty) : read_headers(rr, empty);
        if (h == NULL) goto done;
        if (headers == NULL) {
            Py_ssize_t j;
            headers = PyList_New(0);
            if (headers == NULL) { Py_DECREF(h); goto done; }
            for (j = 0; j < i; j++)
                if (PyList_Append(headers, empty) < 0) { Py_DECREF(h); goto done; }
        }
        int rc = PyList_Append(headers, h);
        Py_DECREF(h);
        if (rc < 0) goto done;
    }
    kdata = PyBytes_FromStringAndSize(NULL, kpos);
    vdata = PyBytes_FromStringAndSize(NULL, vpos);
    if (!kdata || !vdata) goto done;
    char *kdp = PyBytes_AS_STRING(kdata), *vdp = PyBytes_AS_STRING(vdata);
    for (i = 0; i < n; i++) {  /* the spans were bounds-checked by read_bin */
        if (spans[2 * i]) memcpy(kdp + kop[i], spans[2 * i], kop[i + 1] - kop[i]);
        if (spans[2 * i + 1]) memcpy(vdp + vop[i], spans[2 * i + 1], vop[i + 1] - vop[i]);
    }
    if (r.p != r.end) { fail("trailing bytes after the records"); goto done; }
    if (headers && PyList_GET_SIZE(headers) == 0) Py_CLEAR(headers);
    result = Py_BuildValue("(OOOOOOOOO)", od, td, knull ? kvalid : Py_None, koffs, kdata,
                           vnull ? vvalid : Py_None, voffs, vdata, headers ? headers : Py_None);
done:
    PyBuffer_Release(&buf);
    Py_XDECREF(od); Py_XDECREF(td); Py_XDECREF(kvalid); Py_XDECREF(koffs); Py_XDECREF(kdata);
    Py_XDECREF(vvalid); Py_XDECREF(voffs); Py_XDECREF(vdata); Py_XDECREF(headers);
    Py_XDECREF(empty);
    PyMem_Free(spans);
    return result;
}

/* ------------------------------------------------------------------ decode_records */

/* decode_records(section, count, base_offset, first_timestamp, timestamp_type, max_timestamp,
 *                topic, partition, cls) -> list of cls((topic, partition, offset, timestamp,
 *                timestamp_type, key, value, headers))
 * the consumer's records made straight from the section (cls: a tuple subclass of 8 fields,
 * ConsumerRecord); one record whose fields are all atoms is untracked by the cyclic GC. */
static PyObject *decode_records(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count, n, i;
    batch_t b;
    PyObject *topic, *partition, *out = NULL, *empty = NULL, *tsobj = NULL, *ttobj = NULL;
    PyTypeObject *cls;
    int64_t last_ts = 0;
    int kafka = 0;
    if (!PyArg_ParseTuple(args, "y*nLLiLOOO!|p:decode_records", &buf, &count, &b.base, &b.ts0,
                          &b.tstype, &b.maxts, &topic, &partition, &PyType_Type, &cls, &kafka))
        return NULL;
    rd_t r = {(const uint8_t *)buf.buf, (const uint8_t *)buf.buf + buf.len};
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) { fail("cls must be a tuple type"); goto done; }
    if ((kafka ? kread_section(&r, count) : read_section(&r, count)) < 0) goto done;
    n = count;
    out = PyList_New(n);
    empty = PyTuple_New(0);
    ttobj = PyLong_FromLong(b.tstype ? 1 : 0);
    if (!out || !empty || !ttobj) goto done;
    for (i = 0; i < n; i++) {
        Py_ssize_t len;
        const uint8_t *ptr;
        int64_t off, ts;
        rd_t krec;
        rd_t *rr = kafka ? &krec : &r;  /* a Kafka record is read within its own length */
        if ((kafka ? kread_head(&r, &b, &off, &ts, &krec) : read_record_head(&r, &b, &off, &ts)) < 0)
            goto done;
        PyObject *rec = cls->tp_alloc(cls, 8);
        if (rec == NULL) goto done;
        PyList_SET_ITEM(out, i, rec);  /* owned by the list from here on, even half-filled */
        if (tsobj == NULL || ts != last_ts) {  /* records of a batch usually share it */
            Py_XDECREF(tsobj);
            tsobj = PyLong_FromLongLong(ts);
            if (tsobj == NULL) goto done;
            last_ts = ts;
        }
        PyObject *offobj = PyLong_FromLongLong(off);
        if (offobj == NULL) goto done;
        Py_INCREF(topic); PyTuple_SET_ITEM(rec, 0, topic);
        Py_INCREF(partition); PyTuple_SET_ITEM(rec, 1, partition);
        PyTuple_SET_ITEM(rec, 2, offobj);
        Py_INCREF(tsobj); PyTuple_SET_ITEM(rec, 3, tsobj);
        Py_INCREF(ttobj); PyTuple_SET_ITEM(rec, 4, ttobj);
        int atoms = 1;
        for (int f = 5; f < 7; f++) {
            if ((kafka ? kread_bin(rr, &ptr, &len) : read_bin(rr, &ptr, &len)) < 0) goto done;
            PyObject *b;
            if (ptr == NULL) { b = Py_None; Py_INCREF(b); }
            else if ((b = PyBytes_FromStringAndSize((const char *)ptr, len)) == NULL) goto done;
            PyTuple_SET_ITEM(rec, f, b);
        }
        PyObject *h;
        if (kafka ? (krec.end - krec.p == 1 && *krec.p == 0) : (r.p < r.end && *r.p == 0x90)) {
            rr->p++; h = empty; Py_INCREF(h);  /* no headers: the usual case */
        }
        else { h = kafka ? kread_headers(rr, empty) : read_headers(rr, empty); atoms = 0; }
        if (h == NULL) goto done;
        PyTuple_SET_ITEM(rec, 7, h);
        if (atoms && PyObject_IS_GC(rec)) PyObject_GC_UnTrack(rec);
    }
    if (r.p != r.end) { fail("trailing bytes after the records"); goto done; }
    PyBuffer_Release(&buf);
    Py_DECREF(empty); Py_XDECREF(tsobj); Py_DECREF(ttobj);
    return out;
done:
    PyBuffer_Release(&buf);
    Py_XDECREF(out); Py_XDECREF(empty); Py_XDECREF(tsobj); Py_XDECREF(ttobj);
    return NULL;
}

/* ------------------------------------------------------------------ pack_batch */

typedef struct {
    char *buf;
    size_t len, cap;
} wr_t;

static int grow(wr_t *w, size_t extra)
{
    if (w->len + extra <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + extra) cap *= 2;
    char *b = PyMem_Realloc(w->buf, cap);
    if (b == NULL) { PyErr_NoMemory(); return -1; }
    w->buf = b;
    w->cap = cap;
    return 0;
}

static inline void put8(wr_t *w, uint8_t v) { w->buf[w->len++] = (char)v; }
static inline void put16(wr_t *w, uint16_t v) { put8(w, v >> 8); put8(w, v & 0xff); }
static inline void put32(wr_t *w, uint32_t v) { put16(w, v >> 16); put16(w, v & 0xffff); }
static inline void put64(wr_t *w, uint64_t v) { put32(w, (uint32_t)(v >> 32)); put32(w, (uint32_t)v); }

/* msgpack-python's choice of header for an int, a str/bin length, an array length */
static int pack_int(wr_t *w, PyObject *o)
{
    int overflow;
    long long d = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (d == -1 && PyErr_Occurred()) return -1;
    if (grow(w, 9) < 0) return -1;
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(o);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) { PyErr_Clear(); return fail("int too large"); }
            return -1;
        }
        put8(w, 0xcf); put64(w, u);
        return 0;
    }
    if (overflow < 0) return fail("int too small");
    w->len += mp_put_int((uint8_t *)w->buf + w->len, d);
    return 0;
}

static int pack_raw(wr_t *w, const char *p, Py_ssize_t n, int is_str)
{
    if ((uint64_t)n > 0xffffffffULL) return fail("too long");
    if (grow(w, 5 + (size_t)n) < 0) return -1;
    w->len += mp_put_raw_header((uint8_t *)w->buf + w->len, (uint64_t)n, is_str);
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return 0;
}

static int pack_array_header(wr_t *w, Py_ssize_t n)
{
    if ((uint64_t)n > 0xffffffffULL) return fail("too long");
    if (grow(w, 5) < 0) return -1;
    w->len += mp_put_array_header((uint8_t *)w->buf + w->len, (uint64_t)n);
    return 0;
}

static int pack_obj(wr_t *w, PyObject *o, int depth)
{
    if (o == Py_None) { if (grow(w, 1) < 0) return -1; put8(w, 0xc0); return 0; }
    if (PyBytes_CheckExact(o)) return pack_raw(w, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o), 0);
    if (PyByteArray_CheckExact(o)) return pack_raw(w, PyByteArray_AS_STRING(o), PyByteArray_GET_SIZE(o), 0);
    if (PyBool_Check(o)) { if (grow(w, 1) < 0) return -1; put8(w, o == Py_True ? 0xc3 : 0xc2); return 0; }
    if (PyLong_CheckExact(o)) return pack_int(w, o);
    if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) { PyErr_Clear(); return fail("unencodable str"); }
            return -1;
        }
        return pack_raw(w, s, n, 1);
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        if (depth > 8) return fail("nested too deep");
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o), i;
        if (pack_array_header(w, n) < 0) return -1;
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (i = 0; i < n; i++)
            if (pack_obj(w, items[i], depth + 1) < 0) return -1;
        /* a list may be changed by code run from the packer: never here (no callbacks) */
        return 0;
    }
    return fail("type outside the codec's subset");
}


/* pack_batch(rows, segments) -> bytes: msgpack of rows + the rows of each segment, where a
 * segment (first_index, ts_delta, keys | None, values, headers | None, a, k) stands for the
 * rows log.batch.segment_rows would build (send_batch's records, never made into tuples). */
static PyObject *pack_batch(PyObject *self, PyObject *args)
{
    PyObject *rowlist, *segs;
    /* one scratch buffer for every call, kept at its high-water mark (fresh pages cost more
     * than the packing); the GIL is held throughout and no Python code runs in between */
    static wr_t w = {NULL, 0, 0};
    Py_buffer prefix = {NULL};
    Py_ssize_t prefix_count = 0, total, i, j;
    if (!PyArg_ParseTuple(args, "O!O!|y*n:pack_batch", &PyList_Type, &rowlist, &PyList_Type,
                          &segs, &prefix, &prefix_count))
        return NULL;
    PyObject *out = NULL;
    if (prefix_count < 0 || (prefix_count > 0 && prefix.buf == NULL)) {
        fail("bad packed records");
        goto done;
    }
    total = prefix_count + PyList_GET_SIZE(rowlist);
    for (j = 0; j < PyList_GET_SIZE(segs); j++) {
        PyObject *seg = PyList_GET_ITEM(segs, j);
        Py_ssize_t first, a, k;
        PyObject *td, *keys, *values, *headers;
        if (!PyTuple_CheckExact(seg)
            || !PyArg_ParseTuple(seg, "nOOOOnn", &first, &td, &keys, &values, &headers, &a, &k)) {
            PyErr_Clear();
            fail("bad segment");
            goto done;
        }
        if (!PyList_CheckExact(values) || (keys != Py_None && !PyList_CheckExact(keys))
            || (headers != Py_None && !PyList_CheckExact(headers)) || a < 0 || k < a
            || k > PyList_GET_SIZE(values)
            || (keys != Py_None && PyList_GET_SIZE(keys) < k)
            || (headers != Py_None && PyList_GET_SIZE(headers) < k)) {
            fail("bad segment");
            goto done;
        }
        total += k - a;
    }
    w.len = 0;
    size_t start = 0;
    if (prefix.buf != NULL && prefix.len > 0) {  /* records send() already packed, in order */
        /* Where the copy lands matters: a destination a few bytes past the source modulo
         * 4 KiB (both buffers start 16 bytes into a page when they are large) makes the CPU's
         * memmove stall on 4K aliasing — measured 80 us instead of 11 for 256 KiB. Start
         * the section 128 bytes further in w then. */
        size_t hdr = mp_put_array_header(NULL, (uint64_t)total);
        if (grow(&w, 128 + hdr + (size_t)prefix.len) < 0) goto done;
        if ((((uintptr_t)w.buf + hdr - (uintptr_t)prefix.buf) & 4095) < 128) start = 128;
        w.len = start;
    }
    if (pack_array_header(&w, total) < 0) goto done;
    if (prefix.buf != NULL && prefix.len > 0) {
        memcpy(w.buf + w.len, prefix.buf, (size_t)prefix.len);
        w.len += (size_t)prefix.len;
    }
    for (i = 0; i < PyList_GET_SIZE(rowlist); i++)
        if (pack_obj(&w, PyList_GET_ITEM(rowlist, i), 1) < 0) goto done;
    for (j = 0; j < PyList_GET_SIZE(segs); j++) {
        PyObject *seg = PyList_GET_ITEM(segs, j);
        Py_ssize_t first = PyLong_AsSsize_t(PyTuple_GET_ITEM(seg, 0));
        PyObject *td = PyTuple_GET_ITEM(seg, 1), *keys = PyTuple_GET_ITEM(seg, 2);
        PyObject *values = PyTuple_GET_ITEM(seg, 3), *headers = PyTuple_GET_ITEM(seg, 4);
        Py_ssize_t a = PyLong_AsSsize_t(PyTuple_GET_ITEM(seg, 5));
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(seg, 6));
        for (i = a; i < k; i++) {
            PyObject *idx = PyLong_FromSsize_t(first + i - a);
            if (idx == NULL) goto done;
            int rc = pack_array_header(&w, 5);
            if (rc == 0) rc = pack_obj(&w, idx, 2);
            Py_DECREF(idx);
            if (rc < 0 || pack_obj(&w, td, 2) < 0
                || pack_obj(&w, keys == Py_None ? Py_None : PyList_GET_ITEM(keys, i), 2) < 0
                || pack_obj(&w, PyList_GET_ITEM(values, i), 2) < 0)
                goto done;
            if (headers == Py_None) {
                if (pack_array_header(&w, 0) < 0) goto done;
            } else if (pack_obj(&w, PyList_GET_ITEM(headers, i), 2) < 0) {
                goto done;
            }
        }
    }
    out = PyBytes_FromStringAndSize(w.buf + start, (Py_ssize_t)(w.len - start));
    if (w.cap > (64u << 20)) { PyMem_Free(w.buf); w.buf = NULL; w.cap = 0; }
done:
    if (prefix.buf != NULL) PyBuffer_Release(&prefix);
    return out;
}

/* pack_record(buf, used, index, ts_delta, key, value, headers) -> new used: the Python
 * appends' twin of client/_sendpath.c's, one wire record packed at buf[used:] (buf a
 * bytearray that doubles when full, _msgpack_put.h); Unsupported, nothing written, for
 * anything but bytes / None key and value and (str, bytes) headers. */
static PyObject *pack_record(PyObject *self, PyObject *args)
{
    PyObject *ba, *key, *value, *headers;
    Py_ssize_t used;
    long long index, dt;
    if (!PyArg_ParseTuple(args, "O!nLLOOO:pack_record", &PyByteArray_Type, &ba, &used, &index,
                          &dt, &key, &value, &headers))
        return NULL;
    Py_ssize_t n = mp_put_record(ba, used, index, dt, key, value, headers);
    if (n == -2) return fail("record outside the packed subset"), NULL;
    return n < 0 ? NULL : PyLong_FromSsize_t(n);
}



/* ------------------------------------------------------------------ murmur2 and plan */

#include "_murmur2.h"  /* murmur2_c, shared with client/_sendpath.c */


/* ------------------------------------------------------------------ kafka_section */

static int put_varint(wr_t *w, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    if (grow(w, 10) < 0) return -1;
    while (z >= 0x80) { put8(w, (uint8_t)((z & 0x7f) | 0x80)); z >>= 7; }
    put8(w, (uint8_t)z);
    return 0;
}

static int put_kbytes(wr_t *w, const uint8_t *p, Py_ssize_t n)
{
    if (p == NULL) return put_varint(w, -1);
    if (put_varint(w, n) < 0 || grow(w, (size_t)n) < 0) return -1;
    memcpy(w->buf + w->len, p, (size_t)n);
    w->len += (size_t)n;
    return 0;
}

/* a msgpack str (UTF-8 checked, as msgpack's unpacking does) */
static int read_str(rd_t *r, const uint8_t **ptr, Py_ssize_t *len)
{
    NEED(r, 1);
    uint8_t b = *r->p;
    size_t n, h;
    if ((b & 0xe0) == 0xa0) { n = b & 0x1f; h = 1; }
    else if (b == 0xd9) { NEED(r, 2); n = r->p[1]; h = 2; }
    else if (b == 0xda) { NEED(r, 3); n = be16(r->p + 1); h = 3; }
    else if (b == 0xdb) { NEED(r, 5); n = be32(r->p + 1); h = 5; }
    else return fail("not a str");
    NEED(r, h + n);
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p + h, (Py_ssize_t)n, "strict");
    if (s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return fail("bad utf-8"); }
        return -1;
    }
    Py_DECREF(s);
    *ptr = r->p + h;
    *len = (Py_ssize_t)n;
    r->p += h + n;
    return 0;
}

/* kafka_section(section, count) -> bytes: a native (msgpack) records section as an
 * uncompressed Kafka v2 records section of the same records — what a Kafka reader of a
 * natively written batch gets (broker/kafka/records.py native_to_kafka). Header keys must be
 * str and values bytes or nil (Kafka's header types); anything else is Unsupported. */
static PyObject *kafka_section(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count, i;
    PyObject *result = NULL;
    wr_t out = {NULL, 0, 0}, rec = {NULL, 0, 0};
    if (!PyArg_ParseTuple(args, "y*n:kafka_section", &buf, &count))
        return NULL;
    rd_t r = {(const uint8_t *)buf.buf, (const uint8_t *)buf.buf + buf.len};
    if (read_section(&r, count) < 0) goto done;
    if (grow(&out, (size_t)buf.len + (size_t)count * 8 + 16) < 0) goto done;
    for (i = 0; i < count; i++) {
        Py_ssize_t fields, nh, m, j, len;
        int64_t od, td;
        const uint8_t *ptr;
        rec.len = 0;
        if (read_array(&r, &fields) < 0) goto done;
        if (fields != 5) { fail("record is not 5 fields"); goto done; }
        if (read_int(&r, &od) < 0 || read_int(&r, &td) < 0) goto done;
        if (grow(&rec, 1) < 0) goto done;
        put8(&rec, 0);  /* record attributes */
        if (put_varint(&rec, td) < 0 || put_varint(&rec, od) < 0) goto done;
        for (int f = 0; f < 2; f++) {  /* key, value */
            if (read_bin(&r, &ptr, &len) < 0 || put_kbytes(&rec, ptr, len) < 0) goto done;
        }
        if (read_array(&r, &nh) < 0) goto done;
        if (nh > r.end - r.p) { fail("truncated"); goto done; }
        if (put_varint(&rec, nh) < 0) goto done;
        for (j = 0; j < nh; j++) {
            if (read_array(&r, &m) < 0) goto done;
            if (m != 2) { fail("header is not a pair"); goto done; }
            if (read_str(&r, &ptr, &len) < 0 || put_kbytes(&rec, ptr, len) < 0) goto done;
            if (read_bin(&r, &ptr, &len) < 0 || put_kbytes(&rec, ptr, len) < 0) goto done;
        }
        if (put_varint(&out, (int64_t)rec.len) < 0 || grow(&out, rec.len) < 0) goto done;
        memcpy(out.buf + out.len, rec.buf, rec.len);
        out.len += rec.len;
    }
    if (r.p != r.end) { fail("trailing bytes after the records"); goto done; }
    result = PyBytes_FromStringAndSize(out.buf, (Py_ssize_t)out.len);
done:
    PyBuffer_Release(&buf);
    PyMem_Free(out.buf);
    PyMem_Free(rec.buf);
    return result;
}

static PyObject *murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t h = murmur2_c((const uint8_t *)b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(h);
}

/* len of bytes or None (0); -1 with Unsupported for anything else */
static inline Py_ssize_t blen(PyObject *o)
{
    if (PyBytes_CheckExact(o)) return PyBytes_GET_SIZE(o);
    if (o == Py_None) return 0;
    fail("keys and values must be bytes or None");
    return -1;
}

/* plan(keys | None, values, num_partitions, sticky)
 *   keys None or num_partitions 0: one group -> (max_size, argmax, cum)
 *   else -> (max_size, argmax, [(partition, index, keys, values, cum), ...]) ascending by
 *   partition, each in input order; keyless records go to `sticky`. cum (the prefix sums of
 *   the sizes, from 0) and index (input positions) are native int64 bytes: no int object per
 *   record (the caller views them with memoryview(...).cast("q")). */
static PyObject *plan(PyObject *self, PyObject *args)
{
    PyObject *keys, *values, *result = NULL, *groups = NULL;
    Py_ssize_t np, sticky, n, i, best = -1, maxsize = -1;
    int32_t *parts = NULL;
    Py_ssize_t *counts = NULL, *starts = NULL, *order = NULL;
    if (!PyArg_ParseTuple(args, "OOnn:plan", &keys, &values, &np, &sticky)) return NULL;
    if (!PyList_CheckExact(values) || (keys != Py_None && !PyList_CheckExact(keys)))
        return fail("keys and values must be lists"), NULL;
    n = PyList_GET_SIZE(values);
    if (keys != Py_None && PyList_GET_SIZE(keys) != n) return fail("keys and values differ in length"), NULL;
    if (keys == Py_None || np == 0) {  /* one group: sizes and their prefix sums only */
        PyObject *cum = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
        if (cum == NULL) return NULL;
        int64_t *cp = (int64_t *)PyBytes_AS_STRING(cum);
        cp[0] = 0;
        for (i = 0; i < n; i++) {
            Py_ssize_t s = blen(PyList_GET_ITEM(values, i)), k = 0;
            if (s >= 0 && keys != Py_None) k = blen(PyList_GET_ITEM(keys, i));
            if (s < 0 || k < 0) { Py_DECREF(cum); return NULL; }
            s += 12 + k;
            if (s > maxsize) { maxsize = s; best = i; }
            cp[i + 1] = cp[i] + s;
        }
        return Py_BuildValue("(nnN)", maxsize, best, cum);
    }
    if (np <= 0 || sticky < 0 || sticky >= np) return fail("bad partition count"), NULL;
    parts = PyMem_Malloc(sizeof(int32_t) * (n ? n : 1));
    Py_ssize_t *sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    counts = PyMem_Calloc(np, sizeof(Py_ssize_t));
    starts = PyMem_Calloc(np, sizeof(Py_ssize_t));
    order = PyMem_Malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    if (!parts || !sizes || !counts || !starts || !order) { PyErr_NoMemory(); goto done_plan; }
    for (i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        Py_ssize_t kl = blen(k), vl = blen(PyList_GET_ITEM(values, i));
        if (kl < 0 || vl < 0) goto done_plan;
        Py_ssize_t s = 12 + kl + vl;
        sizes[i] = s;
        if (s > maxsize) { maxsize = s; best = i; }
        int32_t p = k == Py_None ? (int32_t)sticky
            : (int32_t)((murmur2_c((const uint8_t *)PyBytes_AS_STRING(k), (size_t)kl) & 0x7fffffff) % (uint32_t)np);
        parts[i] = p;
        counts[p]++;
    }
    Py_ssize_t acc = 0, p;
    for (p = 0; p < np; p++) { starts[p] = acc; acc += counts[p]; }
    for (i = 0; i < n; i++) order[starts[parts[i]]++] = i;  /* stable counting sort */
    groups = PyList_New(0);
    if (groups == NULL) goto done_plan;
    acc = 0;
    for (p = 0; p < np; p++) {
        Py_ssize_t c = counts[p], j, total = 0;
        if (c == 0) continue;
        PyObject *idx = PyBytes_FromStringAndSize(NULL, c * 8), *gk = PyList_New(c);
        PyObject *gv = PyList_New(c), *cum = PyBytes_FromStringAndSize(NULL, (c + 1) * 8);
        PyObject *g = NULL;
        if (!idx || !gk || !gv || !cum) goto group_fail;
        int64_t *ip = (int64_t *)PyBytes_AS_STRING(idx), *cp = (int64_t *)PyBytes_AS_STRING(cum);
        cp[0] = 0;
        for (j = 0; j < c; j++) {
            Py_ssize_t at = order[acc + j];
            total += sizes[at];
            ip[j] = at;
            cp[j + 1] = total;
            PyObject *k = PyList_GET_ITEM(keys, at), *v = PyList_GET_ITEM(values, at);
            Py_INCREF(k);
            Py_INCREF(v);
            PyList_SET_ITEM(gk, j, k);
            PyList_SET_ITEM(gv, j, v);
        }
        acc += c;
        g = Py_BuildValue("(nNNNN)", p, idx, gk, gv, cum);
        if (g == NULL || PyList_Append(groups, g) < 0) { Py_XDECREF(g); goto done_plan; }
        Py_DECREF(g);
        continue;
    group_fail:
        Py_XDECREF(idx); Py_XDECREF(gk); Py_XDECREF(gv); Py_XDECREF(cum);
        goto done_plan;
    }
    result = Py_BuildValue("(nnO)", maxsize, best, groups);
done_plan:
    PyMem_Free(parts); PyMem_Free(sizes); PyMem_Free(counts); PyMem_Free(starts); PyMem_Free(order);
    Py_XDECREF(groups);
    return result;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(section, count, base_offset, first_ts, ts_type, max_ts, kafka=False) -> column buffers of a records section (see module doc)"},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(section, count, base, first_ts, ts_type, max_ts, topic, partition, cls, kafka=False) -> records"},
    {"pack_batch", pack_batch, METH_VARARGS,
     "pack_batch(rows, segments, packed=b'', packed_count=0) -> bytes: msgpack of the packed "
     "records, the rows and the segments' rows"},
    {"pack_record", pack_record, METH_VARARGS,
     "pack_record(buf, used, index, ts_delta, key, value, headers) -> new used"},
    {"kafka_section", kafka_section, METH_VARARGS,
     "kafka_section(section, count) -> bytes: a msgpack records section as a Kafka v2 one"},
    {"murmur2", murmur2, METH_O, "murmur2(key) -> int: Kafka's murmur2 (unsigned 32-bit)"},
    {"plan", plan, METH_VARARGS,
     "plan(keys, values, num_partitions, sticky) -> sizes and partition groups of send_batch"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rafka.log._codec",
    "C accelerator of rafka's record codec; every input it does not handle raises Unsupported "
    "and the caller runs the pure-Python path.", -1, methods,
};

PyMODINIT_FUNC PyInit__codec(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Unsupported = PyErr_NewExceptionWithDoc(
        "rafka.log._codec.Unsupported",
        "Input outside the C codec's subset (or corrupt): use the pure-Python path.",
        PyExc_ValueError, NULL);
    if (Unsupported == NULL || PyModule_AddObjectRef(m, "Unsupported", Unsupported) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* log/speedups.py loads this module only when ABI matches its own: bump both whenever a
       function's arguments change, so a stale build falls back to the pure path. */
    if (PyModule_AddIntConstant(m, "ABI", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
