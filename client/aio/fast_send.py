"""Which function is the sync ``Producer.send``: the C fast path or ``send_threadsafe``.

Theory of operation: ``bind_send(producer)`` is called once per sync ``Producer``, after its
``AsyncProducer`` started (the accumulator exists). It returns the bound ``send`` of a
``rafka.client._sendpath.SendPath`` (``client/_sendpath.c``: the common case of
``AsyncProducer.send_threadsafe`` — topic known, open batch with room, bytes/None key and
value — in one C call, and everything else handed to ``send_threadsafe`` unchanged) when:

* the extension was built (``make install``; setup.py's optional ``ext_modules``) and
  ``RAFKA_NO_SPEEDUPS`` is unset, empty or ``0`` (the rule of ``rafka.log.speedups``);
* the producer is not transactional (the transaction's checks stay in Python);
* ``send_threadsafe`` is not overridden on the instance (serializers wrap it there).

Otherwise it returns ``producer.send_threadsafe`` itself — also, with a ``RuntimeWarning``, when
the classes the C code reads no longer have the slots and attributes it expects. Results,
errors and ordering are the same either way (``tests/client/test_fast_send.py`` runs both
paths against real brokers).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType

from rafka.client.aio.accumulator import ProducerBatch
from rafka.client.aio.futures import FutureRecordMetadata
from rafka.client.aio.producer import _NO_HEADERS, AsyncProducer
from rafka.log.speedups import DISABLED_BY_ENV

__all__ = ["bind_send", "ENABLED"]

sendpath: ModuleType | None = None
if not DISABLED_BY_ENV:
    try:
        from rafka.client import _sendpath as sendpath  # type: ignore[no-redef]
    except ImportError:  # not compiled: send_threadsafe is the send
        sendpath = None

ENABLED = sendpath is not None


def bind_send(producer: AsyncProducer) -> Callable[..., FutureRecordMetadata]:
    """The function to use as ``Producer.send`` for this started ``producer`` (see above)."""
    fallback = producer.send_threadsafe
    if sendpath is None or producer._txn is not None or "send_threadsafe" in vars(producer):
        return fallback
    try:
        path = sendpath.SendPath(producer, fallback, FutureRecordMetadata, ProducerBatch,
                                 _NO_HEADERS)
    except (TypeError, ValueError, AttributeError) as exc:  # the classes changed shape
        warnings.warn(f"rafka: C send path not used ({exc}); send() runs in Python",
                      RuntimeWarning, stacklevel=2)
        return fallback
    send: Callable[..., FutureRecordMetadata] = path.send
    return send
