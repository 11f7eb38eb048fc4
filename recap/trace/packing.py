"""Gzipped trace files: packing a trace's JSON, and unpacking an untrusted file within a bound.

A trace's JSON packs to about a tenth of its size (the app's downloads, the shipped example run).
Whether a file is gzipped is read from its first bytes, not its name. Unpacking reads at most one
byte past the caller's ceiling, so a gzip bomb costs that much memory and no more.
"""

from __future__ import annotations

import gzip
import zlib

GZIP_MAGIC = b"\x1f\x8b"


class PackingError(ValueError):
    """A gzip file that cannot be unpacked within the bound (the trace readers name the file)."""

#: Compression level: 6 packs a heavy run's 2 MB of JSON in about 0.1 s.
LEVEL = 6


def pack(text: str) -> bytes:
    """``text`` (a trace's JSON) gzipped; mtime 0, so the same trace always gives the same bytes."""
    return gzip.compress(text.encode("utf-8"), LEVEL, mtime=0)


def is_packed(raw: bytes) -> bool:
    return raw.startswith(GZIP_MAGIC)


def gunzip_bounded(raw: bytes, limit: int) -> bytes:
    """The gzip stream ``raw`` unpacked, at most ``limit`` bytes of it; PackingError beyond, or when it
    is not gzip."""
    unpacker = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer
    try:
        data = unpacker.decompress(raw, limit + 1)  # never more than one byte past the ceiling in memory
    except zlib.error as exc:
        raise PackingError(f"not a readable gzip file ({exc})") from None
    if len(data) > limit:
        mb = f"{limit / 1e6:.0f} MB"
        raise PackingError(f"the file unpacks to over {mb}; traces up to {mb} are read")
    if not unpacker.eof:
        raise PackingError("the gzip file is cut short")
    if unpacker.unused_data:
        raise PackingError("the gzip file holds more than one trace (data after its end)")
    return data
