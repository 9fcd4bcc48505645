/* rafka.client._sendpath — the optional C fast path of the sync Producer.send() (issue 13).
 *
 * Theory of operation
 * -------------------
 * SendPath(enqueue, fallback, future_type, batch_type, no_headers) is bound over a started
 * producer's Enqueue (client/aio/enqueue.py, the one path every send variant takes in) and
 * holds what a send reads on every call (the Enqueue's Gate's, its metadata's and its
 * accumulator's __dict__, the accumulator's _open / _sticky dicts and its lock's bound
 * locked(), the slot offsets of ProducerBatch and FutureRecordMetadata). Its bound method
 * SendPath.send *is* the instance's Producer.send (client/aio/fast_send.py): one C call per
 * record, no Python frame. It does what Enqueue.send_threadsafe does when nothing is missing
 * (Gate open, topic known, the partition's batch open with room), in order:
 *
 *   Gate checks (not closed, no fatal error; a transactional producer's txn_sending is
 *   True, i.e. its TransactionManager is in IN_TRANSACTION) -> partition count from the
 *   cached metadata -> (Enqueue.stage:)
 *   estimated size (12 + key + value + headers, as record_size) -> the timestamp
 *   (time.time_ns() // 1e6, or the caller's) -> the partition (explicit; Kafka's murmur2 of
 *   the key, log/_murmur2.h, with the default partitioner; -1 = the topic's sticky one) ->
 *   (RecordAccumulator.append, ProducerBatch.add:)
 *   the partition's open batch must exist, keep its records packed (ProducerBatch.packed),
 *   hold no send_batch segments, stay under batch_size with this record, and buffer_memory
 *   must have room -> pack the wire record [offset_delta, timestamp_delta, key, value,
 *   headers] at the end of the batch's packed bytes (log/_msgpack_put.h, the bytes msgpack
 *   would write), count it, raise the batch's max timestamp delta, add the size to the batch
 *   and to acc.used -> a lazy FutureRecordMetadata (tp_alloc and three slot stores, as
 *   object.__new__ would: no Future.__init__).
 *
 * Why a mirror and not a call into the Python path: that path is three Python frames
 * (Enqueue.stage, RecordAccumulator.append, ProducerBatch.add) plus a lock round trip per
 * record, and not paying them is the whole point of this file (it is the per-record cost
 * of Producer.send()). So the steps above are written twice, and
 * tests/client/test_sendpath_mirror.py checks that the two write identical batches (same
 * partitions, record counts and encoded bytes) for the same records; a change to
 * record_size, the partitioner, the batch's packed layout or the accumulator's rules for
 * closing a batch must change both.
 *
 * No object per record is kept: closing the batch is framing only (log.batch.build_batch_rows
 * copies the packed bytes behind the array header), with no row tuple to build, scan for the
 * max timestamp, pack and free in the producer's I/O thread.
 *
 * Anything else — a topic without metadata, a new or full batch, a full buffer, the lock held,
 * a str key, a float timestamp, an out-of-range partition, a custom partitioner, an unknown
 * keyword — calls the fallback (AsyncProducer.send_threadsafe, i.e. Enqueue.send_threadsafe;
 * in the loop, a function returning None so that AsyncProducer.send takes Enqueue.send) with
 * the same arguments before anything was changed, so its results and named errors are the
 * Python path's.
 *
 * Atomicity without taking the lock: the GIL is held for the whole C call, and the append
 * runs no Python code and makes no GC-tracked object (the future is made before; a GC-tracked
 * allocation can start a collection whose finalizers could let another thread run; growing
 * the packed bytearray and new ints are not tracked). So when acc._lock is free no other
 * thread is inside a critical section and none can enter one until the record is in; when it
 * is held (the loop thread's drain was switched out mid-update), the Python path waits for it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <time.h>

#include "../log/_murmur2.h"
#include "../log/_msgpack_put.h"

/* interned names */
static PyObject *s_closed, *s_fatal, *s_txn_sending, *s_topics, *s_used;
static PyObject *kw_names[6];

typedef struct {
    PyObject_HEAD
    PyObject *fallback;     /* AsyncProducer.send_threadsafe, bound */
    PyObject *pdict;        /* the producer's Gate's __dict__ (closed, fatal, txn_sending) */
    PyObject *mdict;        /* its ClusterMetadata's __dict__ (``topics`` is replaced on refresh) */
    PyObject *adict;        /* its RecordAccumulator's __dict__ (``used``) */
    PyObject *open;         /* acc._open: topic -> {partition: ProducerBatch} */
    PyObject *sticky;       /* acc._sticky: topic -> partition */
    PyObject *locked;       /* acc._lock.locked, bound */
    PyObject *future_type;  /* FutureRecordMetadata */
    PyObject *batch_type;   /* ProducerBatch */
    PyObject *no_headers;   /* the shared () of a record without headers */
    Py_ssize_t off_fbatch, off_findex, off_fts;                  /* future slots */
    Py_ssize_t off_packed, off_plen, off_npacked, off_maxdt,      /* ProducerBatch slots */
               off_segs, off_size, off_ts0, off_result;
    PyObject *ts_obj;       /* the last timestamp handed to a future, and its value */
    long long ts;
    long long batch_size, buffer_memory, max_record_size;
    int murmur;             /* the default partitioner: keyed records hash in C */
    int txn;                /* a transactional producer: the Gate's txn_sending must be True */
} SendPath;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int slot_offset(PyObject *type, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type)
             && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok) *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member",
                     ((PyTypeObject *)type)->tp_name, name);
        return -1;
    }
    return 0;
}

static PyObject *get_attr_dict(PyObject *obj)
{
    PyObject *d = PyObject_GetAttrString(obj, "__dict__");
    if (d != NULL && !PyDict_CheckExact(d)) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_TypeError, "expected an instance __dict__");
        return NULL;
    }
    return d;
}

static int get_ll(PyObject *obj, const char *name, long long *out)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int sp_init(SendPath *self, PyObject *args, PyObject *kwds)
{
    PyObject *producer, *fallback, *future_type, *batch_type, *no_headers;  /* producer: its Enqueue */
    if (!PyArg_ParseTuple(args, "OOOOO:SendPath", &producer, &fallback, &future_type,
                          &batch_type, &no_headers))
        return -1;
    if (!PyType_Check(future_type) || !PyType_Check(batch_type)) {
        PyErr_SetString(PyExc_TypeError, "future_type and batch_type must be classes");
        return -1;
    }
    PyObject *acc = NULL, *core = NULL, *meta = NULL, *lock = NULL, *cache = NULL, *gate = NULL;
    int rc = -1;
    if ((acc = PyObject_GetAttrString(producer, "acc")) == NULL) goto done;
    if (acc == Py_None) {
        PyErr_SetString(PyExc_ValueError, "the producer is not started");
        goto done;
    }
    if ((core = PyObject_GetAttrString(producer, "core")) == NULL) goto done;
    if ((meta = PyObject_GetAttrString(core, "metadata")) == NULL) goto done;
    if ((lock = PyObject_GetAttrString(acc, "_lock")) == NULL) goto done;
    if ((cache = PyObject_GetAttrString(producer, "hash_cache")) == NULL) goto done;
    if ((gate = PyObject_GetAttrString(producer, "gate")) == NULL) goto done;
    PyObject *txn = PyObject_GetAttrString(producer, "txn");
    if (txn == NULL) goto done;
    Py_DECREF(txn);
    self->txn = txn != Py_None;  /* set once, in the producer's __init__ */
    Py_XSETREF(self->pdict, get_attr_dict(gate));
    Py_XSETREF(self->mdict, get_attr_dict(meta));
    Py_XSETREF(self->adict, get_attr_dict(acc));
    Py_XSETREF(self->open, PyObject_GetAttrString(acc, "_open"));
    Py_XSETREF(self->sticky, PyObject_GetAttrString(acc, "_sticky"));
    Py_XSETREF(self->locked, PyObject_GetAttrString(lock, "locked"));
    if (!self->pdict || !self->mdict || !self->adict || !self->open || !self->sticky
        || !self->locked)
        goto done;
    if (!PyDict_CheckExact(self->open) || !PyDict_CheckExact(self->sticky)) {
        PyErr_SetString(PyExc_TypeError, "accumulator _open / _sticky must be dicts");
        goto done;
    }
    Py_INCREF(fallback); Py_XSETREF(self->fallback, fallback);
    Py_INCREF(future_type); Py_XSETREF(self->future_type, future_type);
    Py_INCREF(batch_type); Py_XSETREF(self->batch_type, batch_type);
    Py_INCREF(no_headers); Py_XSETREF(self->no_headers, no_headers);
    if (slot_offset(future_type, "_batch", &self->off_fbatch) < 0
        || slot_offset(future_type, "_index", &self->off_findex) < 0
        || slot_offset(future_type, "_ts", &self->off_fts) < 0
        || slot_offset(batch_type, "packed", &self->off_packed) < 0
        || slot_offset(batch_type, "packed_len", &self->off_plen) < 0
        || slot_offset(batch_type, "npacked", &self->off_npacked) < 0
        || slot_offset(batch_type, "max_dt", &self->off_maxdt) < 0
        || slot_offset(batch_type, "segs", &self->off_segs) < 0
        || slot_offset(batch_type, "size", &self->off_size) < 0
        || slot_offset(batch_type, "ts0", &self->off_ts0) < 0
        || slot_offset(batch_type, "result", &self->off_result) < 0)
        goto done;
    if (get_ll(acc, "batch_size", &self->batch_size) < 0
        || get_ll(acc, "buffer_memory", &self->buffer_memory) < 0
        || get_ll(producer, "max_record_size", &self->max_record_size) < 0)
        goto done;
    self->murmur = cache != Py_None;
    rc = 0;
done:
    Py_XDECREF(acc); Py_XDECREF(core); Py_XDECREF(meta); Py_XDECREF(lock); Py_XDECREF(cache);
    Py_XDECREF(gate);
    return rc;
}

static int sp_traverse(SendPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback); Py_VISIT(self->pdict); Py_VISIT(self->mdict);
    Py_VISIT(self->adict); Py_VISIT(self->open); Py_VISIT(self->sticky);
    Py_VISIT(self->locked); Py_VISIT(self->future_type);
    Py_VISIT(self->batch_type); Py_VISIT(self->no_headers); Py_VISIT(self->ts_obj);
    return 0;
}

static int sp_clear(SendPath *self)
{
    Py_CLEAR(self->fallback); Py_CLEAR(self->pdict); Py_CLEAR(self->mdict);
    Py_CLEAR(self->adict); Py_CLEAR(self->open); Py_CLEAR(self->sticky);
    Py_CLEAR(self->locked); Py_CLEAR(self->future_type);
    Py_CLEAR(self->batch_type); Py_CLEAR(self->no_headers); Py_CLEAR(self->ts_obj);
    return 0;
}

static void sp_dealloc(SendPath *self)
{
    PyObject_GC_UnTrack(self);
    sp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* len of an exact bytes or 0 for None; -1: anything else (the Python path decides) */
static inline Py_ssize_t blen(PyObject *o)
{
    if (o == Py_None) return 0;
    if (PyBytes_CheckExact(o)) return PyBytes_GET_SIZE(o);
    return -1;
}

/* exact int in [lo, hi] -> 0 and *out; -1 (no error set) otherwise */
static inline int exact_ll(PyObject *o, long long *out)
{
    if (!PyLong_CheckExact(o)) return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* headers: a non-empty list/tuple of (str, bytes) tuples -> their size as record_size counts
 * it; -1: something else (the Python path decides) */
static Py_ssize_t headers_size(PyObject *headers)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(headers), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = items[i];
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 2) return -1;
        PyObject *hk = PyTuple_GET_ITEM(h, 0), *hv = PyTuple_GET_ITEM(h, 1);
        if (!PyUnicode_CheckExact(hk) || !PyBytes_CheckExact(hv)) return -1;
        total += PyUnicode_GET_LENGTH(hk) + PyBytes_GET_SIZE(hv) + 4;
    }
    return total;
}

static int kw_index(PyObject *name)
{
    for (int i = 0; i < 6; i++)
        if (name == kw_names[i]) return i;
    for (int i = 0; i < 6; i++)
        if (PyUnicode_Compare(name, kw_names[i]) == 0) return i;
    PyErr_Clear();
    return -1;
}

/* send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None) */
static PyObject *sp_send(SendPath *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    PyObject *a[6] = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None};
    PyObject *hdrs = NULL, *fut = NULL, *r;
    if (nargs < 1 || nargs > 6) goto fallback;
    for (Py_ssize_t i = 0; i < nargs; i++) a[i] = args[i];
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t j = 0; j < nk; j++) {
            int k = kw_index(PyTuple_GET_ITEM(kwnames, j));
            if (k < nargs) goto fallback;  /* unknown or given twice: Python's TypeError */
            a[k] = args[nargs + j];
        }
    }
    PyObject *topic = a[0], *value = a[1], *key = a[2], *headers = a[3];
    if (!PyUnicode_CheckExact(topic)) goto fallback;

    /* the producer's Gate, as Enqueue.check_send: open, no fatal error, and a transactional
     * producer in a transaction (TransactionManager._to keeps txn_sending equal to
     * "state is IN_TRANSACTION"; read under the GIL with the append, so no state change can
     * fall between the check and the record, as it can between send_threadsafe's check and
     * its append) */
    if (PyDict_GetItemWithError(self->pdict, s_closed) != Py_False
        || PyDict_GetItemWithError(self->pdict, s_fatal) != Py_None
        || (self->txn && PyDict_GetItemWithError(self->pdict, s_txn_sending) != Py_True))
        goto fallback_err;
    PyObject *topics = PyDict_GetItemWithError(self->mdict, s_topics);
    if (topics == NULL || !PyDict_CheckExact(topics)) goto fallback_err;
    PyObject *parts = PyDict_GetItemWithError(topics, topic);
    if (parts == NULL || !PyDict_CheckExact(parts) || PyDict_GET_SIZE(parts) == 0)
        goto fallback_err;
    long long n = PyDict_GET_SIZE(parts);

    Py_ssize_t kl = blen(key), vl = blen(value);
    if (kl < 0 || vl < 0) goto fallback;
    long long size = 12 + (long long)kl + (long long)vl;
    if (headers == Py_None) {
        hdrs = self->no_headers;
    } else if (PyList_CheckExact(headers) || PyTuple_CheckExact(headers)) {
        hdrs = headers;  /* packed from the caller's own sequence, nothing kept */
        if (PySequence_Fast_GET_SIZE(headers) > 0) {
            Py_ssize_t hs = headers_size(headers);
            if (hs < 0) goto fallback;
            size += hs;
        }
    } else {
        goto fallback;
    }
    if (size > self->max_record_size) goto fallback;  /* RecordTooLargeError */

    long long ts;
    if (a[5] == Py_None) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);  /* time.time_ns() // 1_000_000 */
        ts = (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    } else if (exact_ll(a[5], &ts) < 0) {
        goto fallback;
    }

    long long p;
    if (a[4] != Py_None) {
        if (exact_ll(a[4], &p) < 0 || p < 0 || p >= n) goto fallback;  /* _choose raises */
    } else if (key == Py_None) {
        p = -1;
    } else if (self->murmur) {
        p = (long long)((murmur2_c((const uint8_t *)PyBytes_AS_STRING(key), (size_t)kl)
                         & 0x7fffffffu) % (uint32_t)n);
    } else {
        goto fallback;  /* a custom partitioner: Python calls it */
    }

    /* Every object the append needs that the GC tracks is made here, before the lock check:
     * a GC-tracked allocation can run a collection, whose finalizers run Python code and so
     * may let another thread in. What follows the check allocates only ints and grows a list,
     * so the GIL is never given up until the record is in. */
    fut = ((PyTypeObject *)self->future_type)->tp_alloc((PyTypeObject *)self->future_type, 0);
    if (fut == NULL) goto error;

    /* The accumulator lock is free: no thread is inside a critical section, and none can
     * enter one while this C call holds the GIL. Held: the owner is mid-update (drain, a
     * Python append), so the Python path waits for it. */
    r = PyObject_CallNoArgs(self->locked);
    if (r == NULL) goto error;
    Py_DECREF(r);
    if (r != Py_False) goto fallback;

    PyObject *batch = NULL;
    PyObject *by_part = PyDict_GetItemWithError(self->open, topic);
    if (by_part != NULL && PyDict_CheckExact(by_part) && PyDict_GET_SIZE(by_part) > 0) {
        PyObject *pk;
        if (p >= 0) {
            pk = PyLong_FromLongLong(p);
        } else {
            pk = PyDict_GetItemWithError(self->sticky, topic);
            pk = pk != NULL ? Py_NewRef(pk) : PyLong_FromLong(-1);
        }
        if (pk == NULL) goto error;
        batch = PyDict_GetItemWithError(by_part, pk);
        Py_DECREF(pk);
    }
    long long bsize, used, ts0, plen, max_dt;
    PyObject *packed, *npacked, *used_obj;
    if (batch == NULL || Py_TYPE(batch) != (PyTypeObject *)self->batch_type
        || SLOT(batch, self->off_segs) != Py_None
        || (packed = SLOT(batch, self->off_packed)) == NULL || !PyByteArray_CheckExact(packed)
        || SLOT(batch, self->off_plen) == NULL || exact_ll(SLOT(batch, self->off_plen), &plen) < 0
        || (npacked = SLOT(batch, self->off_npacked)) == NULL || !PyLong_CheckExact(npacked)
        || SLOT(batch, self->off_maxdt) == NULL || exact_ll(SLOT(batch, self->off_maxdt), &max_dt) < 0
        || SLOT(batch, self->off_size) == NULL || exact_ll(SLOT(batch, self->off_size), &bsize) < 0
        || SLOT(batch, self->off_ts0) == NULL || exact_ll(SLOT(batch, self->off_ts0), &ts0) < 0
        || SLOT(batch, self->off_result) == NULL
        || (used_obj = PyDict_GetItemWithError(self->adict, s_used)) == NULL
        || exact_ll(used_obj, &used) < 0
        || bsize + size >= self->batch_size || used + size > self->buffer_memory)
        goto fallback_err;  /* new batch, sticky pick, batch closing, buffer full: Python */

    Py_ssize_t index = PyLong_AsSsize_t(npacked);
    if (index < 0) goto fallback_err;
    long long dt = ts - ts0;
    /* the bytes past packed_len are room, not records: writing there (and growing the
     * bytearray) changes nothing anyone reads until packed_len moves below */
    Py_ssize_t new_len = mp_put_record(packed, (Py_ssize_t)plen, index, dt, key, value, hdrs);
    if (new_len == -2) goto fallback;  /* e.g. a header name that is not UTF-8: Python */
    if (new_len < 0) goto error;
    PyObject *new_size = PyLong_FromLongLong(bsize + size);
    PyObject *new_used = PyLong_FromLongLong(used + size);
    PyObject *new_plen = PyLong_FromSsize_t(new_len), *new_n = PyLong_FromSsize_t(index + 1);
    PyObject *new_max = dt > max_dt ? PyLong_FromLongLong(dt) : Py_NewRef(SLOT(batch, self->off_maxdt));
    /* the future's timestamp: one int per millisecond, shared by that millisecond's records */
    if (self->ts_obj == NULL || self->ts != ts) {
        Py_XSETREF(self->ts_obj, PyLong_FromLongLong(ts));
        self->ts = ts;
    }
    if (new_size == NULL || new_used == NULL || new_plen == NULL || new_n == NULL
        || new_max == NULL || self->ts_obj == NULL) {
        Py_XDECREF(new_size); Py_XDECREF(new_used); Py_XDECREF(new_plen); Py_XDECREF(new_n);
        Py_XDECREF(new_max);
        goto error;
    }
    /* the used key exists: this store replaces a value and cannot fail */
    PyDict_SetItem(self->adict, s_used, new_used);
    Py_DECREF(new_used);
    Py_SETREF(SLOT(batch, self->off_size), new_size);
    Py_SETREF(SLOT(batch, self->off_plen), new_plen);
    Py_SETREF(SLOT(batch, self->off_maxdt), new_max);
    /* the old count is this record's index: it passes to the future */
    SLOT(fut, self->off_findex) = SLOT(batch, self->off_npacked);
    SLOT(batch, self->off_npacked) = new_n;
    SLOT(fut, self->off_fbatch) = Py_NewRef(SLOT(batch, self->off_result));
    SLOT(fut, self->off_fts) = Py_NewRef(self->ts_obj);
    return fut;

error:
    Py_XDECREF(fut);
    return NULL;
fallback_err:
    if (PyErr_Occurred()) goto error;
fallback:
    Py_XDECREF(fut);
    return PyObject_Vectorcall(self->fallback, args, (size_t)nargs, kwnames);
}

static PyMethodDef sp_methods[] = {
    {"send", (PyCFunction)(void (*)(void))sp_send, METH_FASTCALL | METH_KEYWORDS,
     "send(topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None)"
     " -> FutureRecordMetadata (AsyncProducer.send_threadsafe, common case in C)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SendPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rafka.client._sendpath.SendPath",
    .tp_basicsize = sizeof(SendPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SendPath(enqueue, fallback, future_type, batch_type, no_headers): "
              "the C fast path of Producer.send (see the module doc)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sp_init,
    .tp_dealloc = (destructor)sp_dealloc,
    .tp_traverse = (traverseproc)sp_traverse,
    .tp_clear = (inquiry)sp_clear,
    .tp_methods = sp_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rafka.client._sendpath",
    "C fast path of the sync Producer.send() over the producer's Enqueue; anything it does "
    "not handle goes to its fallback (AsyncProducer.send_threadsafe) unchanged.", -1, NULL,
};

PyMODINIT_FUNC PyInit__sendpath(void)
{
    static const char *names[6] = {"topic", "value", "key", "headers", "partition", "timestamp_ms"};
    for (int i = 0; i < 6; i++)
        if ((kw_names[i] = PyUnicode_InternFromString(names[i])) == NULL) return NULL;
    if ((s_closed = PyUnicode_InternFromString("closed")) == NULL
        || (s_fatal = PyUnicode_InternFromString("fatal")) == NULL
        || (s_txn_sending = PyUnicode_InternFromString("txn_sending")) == NULL
        || (s_topics = PyUnicode_InternFromString("topics")) == NULL
        || (s_used = PyUnicode_InternFromString("used")) == NULL)
        return NULL;
    if (PyType_Ready(&SendPathType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "SendPath", (PyObject *)&SendPathType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
