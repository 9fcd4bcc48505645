"""Which function is the sync ``Producer.send``: the C fast path or ``send_threadsafe``; and the
C fast path of ``AsyncProducer.send``.

Theory of operation: ``bind_send(producer)`` is called once per sync ``Producer``, after its
``AsyncProducer`` started (the accumulator exists). It returns the bound ``send`` of a
``rafka.client._sendpath.SendPath`` over the producer's ``Enqueue`` (``client/_sendpath.c``:
the common case of ``Enqueue.send_threadsafe`` — topic known, open batch with room, bytes/None
key and value — in one C call, and everything else handed to ``send_threadsafe`` unchanged;
why it mirrors the Python steps rather than calling them: its header comment) when:

* the extension was built (``make install``; setup.py's optional ``ext_modules``) and
  ``RAFKA_NO_SPEEDUPS`` is unset, empty or ``0`` (the rule of ``rafka.log.speedups``);
* ``send_threadsafe`` is not overridden on the instance (serializers wrap it there).

Otherwise it returns ``producer.send_threadsafe`` itself — also, with a ``RuntimeWarning``, when
the classes the C code reads no longer have the slots and attributes it expects. Results,
errors and ordering are the same either way (``tests/client/test_fast_send.py`` runs both
paths against real brokers).

``bind_loop_send(producer)`` is the same ``SendPath`` for ``AsyncProducer.send`` in the
producer's own trio loop, whose fallback returns ``None`` instead of sending: ``send`` then
takes its Python path (which may wait for metadata or buffer room), so the C call never blocks
the loop. ``None`` when the extension is not there.

A transactional producer takes the C path too: it appends only while the producer's
``Gate.txn_sending`` is true, which ``TransactionManager._to`` keeps equal to "state is
IN_TRANSACTION" — ``check_send``'s test. Everything a transaction adds beyond that happens after
the append, in the sender (a partition's batches wait for its ADD_PARTITIONS_TO_TXN; abort and
fencing drop or fail whatever was appended), so a record appended in C is aborted, fenced or
committed exactly as one appended in Python.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from rafka.client.aio.accumulator import ProducerBatch
from rafka.client.aio.enqueue import NO_HEADERS
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer import AsyncProducer
from rafka.log.speedups import DISABLED_BY_ENV

__all__ = ["bind_send", "bind_loop_send", "ENABLED"]

sendpath: ModuleType | None = None
if not DISABLED_BY_ENV:
    try:
        from rafka.client import _sendpath as sendpath  # type: ignore[no-redef]
    except ImportError:  # not compiled: send_threadsafe is the send
        sendpath = None

ENABLED = sendpath is not None

SendFn = Callable[..., FutureRecordMetadata]


def _send_path(producer: AsyncProducer, fallback: Callable[..., Any], *,
               warn: bool) -> SendFn | None:
    """The bound ``send`` of a ``SendPath`` over ``producer`` (None if the classes changed)."""
    assert sendpath is not None
    try:
        path = sendpath.SendPath(producer._enqueue, fallback, FutureRecordMetadata,
                                 ProducerBatch, NO_HEADERS)
    except (TypeError, ValueError, AttributeError) as exc:  # the classes changed shape
        if warn:
            warnings.warn(f"rafka: C send path not used ({exc}); send() runs in Python",
                          RuntimeWarning, stacklevel=3)
        return None
    send: SendFn = path.send
    return send


def bind_send(producer: AsyncProducer) -> SendFn:
    """The function to use as ``Producer.send`` for this started ``producer`` (see above)."""
    fallback = producer.send_threadsafe
    if sendpath is None or "send_threadsafe" in vars(producer):
        return fallback
    return _send_path(producer, fallback, warn=True) or fallback


def _not_here(*args: Any, **kwargs: Any) -> None:
    """The loop path's fallback: ``AsyncProducer.send`` goes on in Python."""
    return None


def bind_loop_send(producer: AsyncProducer) -> Callable[..., FutureRecordMetadata | None] | None:
    """The C append for ``AsyncProducer.send`` in the loop thread, or None (see above)."""
    if sendpath is None:
        return None
    return _send_path(producer, _not_here, warn=False)
