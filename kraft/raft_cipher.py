"""The Raft port's frame cipher: AES-256-GCM in place of pysyncobj's Fernet (issue 26).

Theory of operation
-------------------
pysyncobj seals every Raft message with the cluster secret: it pickles and zlib-compresses the
message, then calls its encryptor's ``encrypt_at_time``; a receiver calls
``extract_timestamp`` (and drops the connection unless the value is at least the previous
frame's on that connection), then ``decrypt``, and unpickles only what decrypted. The library's
encryptor is ``cryptography``'s Fernet (AES-128-CBC + HMAC-SHA256, base64 text): ~80 µs of a
voter's CPU per message more than AES-GCM as an idle cluster meets it, once per heartbeat after
the tick thread slept (~3 ms/s of an idle 3-node cluster's ~35; docs/performance.md, "Raft
frames sealed with AES-GCM"). ``RaftFrameCipher`` keeps the
interface and the guarantees (only holders of the secret can read a frame or make one that
opens) and seals with AES-256-GCM, one AEAD call a side, binary, no base64.

A sealed frame::

    0x01 | salt (16 bytes) | counter (8 bytes, big-endian) | AES-GCM(payload) + tag (16 bytes)

* **Keys.** The master key is PBKDF2-SHA256 of the secret (100,000 rounds, rafka's own salt, so
  it is not Fernet's key). Every cipher instance — one per voter process — draws a random
  16-byte ``salt`` and seals with ``HKDF(master, salt)``; a receiver derives and caches the key
  of each sender salt it meets. The nonce is the sender's 64-bit counter, so a (key, nonce)
  pair is never used twice: a restarted voter draws a new salt, hence a new key, and the
  counter of one key cannot wrap. (A random 96-bit nonce under one cluster-wide key would
  collide after ~2^32 messages, days at a busy cluster's rate; that is why the key is per
  sender.)
* **Authenticated header.** The version byte, salt and counter are the AEAD's associated
  data: a tampered header fails to open like a tampered body.
* **Replay.** ``extract_timestamp`` answers the counter. pysyncobj drops a connection whose
  frames' values go backwards, and binds every frame to its connection with the random key
  exchanged first, so a frame replayed on another connection or an older one on the same
  connection is refused — as with Fernet, whose value is a one-second clock.
* **Rolling upgrade.** Fernet frames (base64 text: they begin with ``g``) are still opened, so a
  voter of this version reads an older voter. What a voter *sends* is
  ``raft.frame.cipher``: ``aes-gcm`` (default) or ``fernet``. To upgrade voters of a version
  that only speaks Fernet one at a time, set ``fernet`` on the new ones until the last old voter
  is gone, then drop the setting (a restart per voter).

Everything runs on pysyncobj's tick thread (encrypt on send, open on receive); the salt-key
cache is bounded, so a peer without the secret that sends frames under fresh salts costs one
HKDF each and no memory (kraft/raft_guard.py bounds how much such a peer may send at all).
"""

from __future__ import annotations

import itertools
import os
import struct
from collections import OrderedDict
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

__all__ = ["FRAME_CIPHERS", "RaftFrameCipher", "RaftFrameError"]

FRAME_CIPHERS: Final = ("aes-gcm", "fernet")
_VERSION: Final = 0x01
_HEADER = struct.Struct(">B16sQ")  # version, sender salt, counter
_MASTER_SALT: Final = b"rafka raft frame master key v1"
_HKDF_INFO: Final = b"rafka raft frame aes-256-gcm v1"
_SENDER_KEYS_KEPT: Final = 256


class RaftFrameError(ValueError):
    """A Raft frame that is not a frame of this cluster (wrong secret, tampered, truncated)."""


def _master_key(secret: bytes) -> bytes:
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=_MASTER_SALT, iterations=100_000)
    return kdf.derive(secret)


def _sender_key(master: bytes, salt: bytes) -> AESGCM:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=_HKDF_INFO)
    return AESGCM(hkdf.derive(master))


def _aead_header(token: bytes) -> bytes:
    """The header of an AES-GCM frame; a frame too short for a header and a tag is refused."""
    if len(token) < _HEADER.size + 16:
        raise RaftFrameError(f"a Raft frame of {len(token)} bytes is shorter than its header and tag")
    return token[: _HEADER.size]


class RaftFrameCipher:
    """pysyncobj's encryptor interface (``encrypt_at_time``, ``extract_timestamp``,
    ``decrypt``) over AES-256-GCM frames; Fernet frames are opened too (see the module text)."""

    def __init__(self, secret: str | bytes, fernet: Fernet, send: str = "aes-gcm") -> None:
        if send not in FRAME_CIPHERS:
            raise ValueError(f"raft.frame.cipher must be one of {', '.join(FRAME_CIPHERS)}, not {send!r}")
        if isinstance(secret, str):
            secret = secret.encode()
        self.send_cipher = send
        self._fernet = fernet
        self._master = _master_key(secret)
        self._salt = os.urandom(16)
        self._seal = _sender_key(self._master, self._salt)
        self._counter = itertools.count(1)  # next() is atomic under the GIL
        self._openers: OrderedDict[bytes, AESGCM] = OrderedDict()  # sender salt -> its key
        self.opened = {"aes-gcm": 0, "fernet": 0}  # frames opened, by cipher (metrics, tests)

    # -- sending --------------------------------------------------------------------------

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        if self.send_cipher == "fernet":
            return self._fernet.encrypt_at_time(data, current_time)
        header = _HEADER.pack(_VERSION, self._salt, next(self._counter))
        return header + self._seal.encrypt(header[-8:].rjust(12, b"\0"), data, header)

    # -- receiving ------------------------------------------------------------------------

    def extract_timestamp(self, token: bytes) -> int:
        """The frame's counter (a Fernet frame: its time); pysyncobj refuses it going back."""
        if token[:1] != b"\x01":
            return self._fernet.extract_timestamp(token)
        return int(_HEADER.unpack(_aead_header(token))[2])

    def decrypt(self, token: bytes) -> bytes:
        if token[:1] != b"\x01":
            try:
                plain: bytes = self._fernet.decrypt(token)
            except InvalidToken:
                raise RaftFrameError("a Fernet Raft frame did not open with the cluster secret") from None
            self.opened["fernet"] += 1
            return plain
        header = _aead_header(token)
        salt = header[1:17]
        opener = self._openers.get(salt)
        if opener is None:
            opener = _sender_key(self._master, salt)
        try:
            plain = opener.decrypt(header[-8:].rjust(12, b"\0"), token[_HEADER.size:], header)
        except InvalidTag:
            raise RaftFrameError("a Raft frame did not open with the cluster secret") from None
        if salt not in self._openers:  # remember only senders that proved the secret
            self._openers[salt] = opener
            if len(self._openers) > _SENDER_KEYS_KEPT:
                self._openers.popitem(last=False)
        self.opened["aes-gcm"] += 1
        return plain
