"""Which record codec runs: the C accelerator ``rafka.log._codec`` or the pure-Python path.

Theory of operation: chosen once, at import. ``codec`` is the extension module when it was
built (``make install`` compiles ``log/_codec.c`` in place; a missing compiler leaves it out)
and ``RAFKA_NO_SPEEDUPS`` is unset, empty or ``0``; otherwise ``None``. Callers test
``codec is not None`` and, when the C call raises ``Unsupported`` (input outside its msgpack
subset, or corrupt), run the pure-Python path on the same input — so results and named errors
are those of the pure path either way (``log/_codec.c`` explains the subset).

A build whose ``ABI`` differs from ``CODEC_ABI`` (a checkout updated without ``make install``:
the C functions' arguments changed under it) is not used: a warning names the fix and the pure
path runs, instead of every C call failing on its arguments.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType

__all__ = ["codec", "ENABLED", "Unsupported", "DISABLED_BY_ENV", "CODEC_ABI"]

CODEC_ABI = 2  # log/_codec.c's ABI constant: bump both when a C function's arguments change

DISABLED_BY_ENV = os.environ.get("RAFKA_NO_SPEEDUPS", "") not in ("", "0")

codec: ModuleType | None = None
if not DISABLED_BY_ENV:
    try:
        from rafka.log import _codec as codec  # type: ignore[no-redef]
    except ImportError:  # not compiled: the pure-Python codec
        codec = None
    if codec is not None and getattr(codec, "ABI", 1) != CODEC_ABI:
        warnings.warn(f"rafka.log._codec is a stale build (ABI {getattr(codec, 'ABI', 1)}, this "
                      f"checkout needs {CODEC_ABI}): using the pure-Python codec; run "
                      "`make install` to rebuild it", RuntimeWarning, stacklevel=1)
        codec = None

ENABLED = codec is not None


class _NeverRaised(Exception):
    """Stands in for ``Unsupported`` when the extension is not loaded."""


Unsupported: type[Exception] = codec.Unsupported if codec is not None else _NeverRaised
