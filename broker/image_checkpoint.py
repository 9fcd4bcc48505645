"""A broker's metadata image kept on disk, so that a restart folds only the tail of ``@metadata``.

Theory of operation
-------------------
After a restart the broker's image is EMPTY and ``MetadataListener`` catches up by folding the
``@metadata`` log from offset 0 (or from the controller's snapshot when the log starts later),
which grows with the cluster's history: ~19,000 records after a long torture run, ten 2,000-record
fetches and their folds before the first image (docs/quorum.md, "Run D"). So the broker keeps a
checkpoint of its *current* image — always a published, caught-up image, never an intermediate
one of the catch-up — in ``DATA_DIR/@metadata-image.ckpt``, and a restarted broker starts its
catch-up from that image instead of EMPTY: it asks for ``offset + 1`` onwards and folds only
what came since. Nothing is published before the catch-up reaches the active controller's
committed offset, exactly as after a fold from 0 (broker/metadata_listener.py), so the
checkpoint changes how much is folded, not what the replica manager sees: the first image's
local changes are computed the way they are for a controller snapshot (the final image's
records folded onto the image the publisher had, plus deletes).

File: ``MAGIC`` (8 bytes), the payload's length (u64, big endian) and CRC-32 (u32), then the
msgpack payload ``{v: 1, cluster_id, offset, epoch, records: [record dicts]}`` — the records of
``image_to_records(image)``, which fold back to an equal image (metadata/snapshot.py). It is
written to a temporary file, fsynced and renamed over the old one, so a reader sees the old
checkpoint or the new one, whole. ``load`` returns None — and the broker folds from 0 as
before — for a missing file, a wrong magic or version, a short file, a CRC mismatch, a payload
that does not decode, another cluster's id, or records that do not fold; every case but the
missing file logs a WARNING naming the reason. The catch-up's target is still the active
controller's committed offset; when the controller has trimmed its log past the checkpoint it
answers with its own snapshot, which replaces the checkpoint's image as it replaces any older
state. A checkpoint holds only what this broker folded from committed records, so it cannot be
ahead of the committed log of the same history; when the active controller reports a committed
offset below it anyway (a controller quorum started afresh under the same cluster id, or a
deposed leader's stale answer) the listener drops it, folds from the start and replaces it.

When: ``MetadataListener`` saves, in a worker thread (the image is immutable), whenever the
current image is ``every_records`` or more records past the last checkpoint, at most once per
``min_interval_s`` (broker setting ``metadata.checkpoint.records``, default 1000; 0 disables
both the saving and the loading).
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
from rafka.metadata.image import MetadataImage
from rafka.metadata.records import record_from_dict
from rafka.metadata.snapshot import image_to_records, records_to_image

__all__ = ["ImageCheckpoint", "CHECKPOINT_NAME", "MAGIC"]

log = logging.getLogger("rafka.metadata.checkpoint")

CHECKPOINT_NAME = "@metadata-image.ckpt"
MAGIC = b"RFKIMG1\n"
_HEADER = struct.Struct(">QI")  # payload length, CRC-32 of the payload
_VERSION = 1


@dataclass
class ImageCheckpoint:
    """The checkpoint file of one broker (``path``) for one cluster (``cluster_id``)."""

    path: Path
    cluster_id: str
    every_records: int = 1000
    min_interval_s: float = 1.0
    saved_offset: int = -1  # the offset of the newest checkpoint written or loaded
    saves: int = 0

    def encode(self, image: MetadataImage) -> bytes:
        payload = msgpack.packb({
            "v": _VERSION, "cluster_id": self.cluster_id, "offset": image.offset,
            "epoch": image.epoch, "records": [r.to_dict() for r in image_to_records(image)],
        }, use_bin_type=True)
        return MAGIC + _HEADER.pack(len(payload), zlib.crc32(payload)) + payload

    def save(self, image: MetadataImage) -> None:
        """Write ``image`` as the checkpoint (atomically; blocking: call it in a worker thread).
        An OSError (a full disk) is logged and leaves the previous checkpoint in place."""
        data = self.encode(image)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("metadata image checkpoint at offset %d not written: %s", image.offset, exc)
            try:
                tmp.unlink()
            except OSError:
                pass
            return
        self.saved_offset = image.offset
        self.saves += 1

    def load(self) -> MetadataImage | None:
        """The checkpointed image, or None (missing or invalid: module docstring)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._reject(f"unreadable: {exc}")
        head = len(MAGIC) + _HEADER.size
        if len(data) < head or not data.startswith(MAGIC):
            return self._reject("not a checkpoint (magic)")
        length, crc = _HEADER.unpack_from(data, len(MAGIC))
        payload = data[head:]
        if len(payload) != length:
            return self._reject(f"{len(payload)} payload bytes, the header says {length}")
        if zlib.crc32(payload) != crc:
            return self._reject("CRC mismatch")
        try:
            obj: Any = msgpack.unpackb(payload, raw=False)
            if not isinstance(obj, dict) or obj.get("v") != _VERSION:
                return self._reject(f"version {obj.get('v') if isinstance(obj, dict) else '?'}")
            if obj.get("cluster_id") != self.cluster_id:
                return self._reject(f"cluster {obj.get('cluster_id')!r}, this node's is {self.cluster_id!r}")
            offset, epoch = int(obj["offset"]), int(obj["epoch"])
            image = records_to_image([record_from_dict(r) for r in obj["records"]], offset, epoch)
        except Exception as exc:  # noqa: BLE001 - any undecodable content means: fold from 0
            return self._reject(f"does not decode: {type(exc).__name__}: {exc}")
        self.saved_offset = image.offset
        return image

    def _reject(self, why: str) -> None:
        log.warning("metadata image checkpoint %s ignored (%s): folding the log from the start",
                    self.path, why)
        return None
