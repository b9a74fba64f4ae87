"""Small file helpers: atomic replacement, exclusive creation, hashing, JSON lines."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def canonical_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, ASCII only (for hashing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("ascii")).hexdigest()


def _write_temp(path: Path, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace`` (readers see the
    old or the new file, never a torn one). Use only for files this run owns."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _write_temp(p, raw)
    os.replace(tmp, p)


def exclusive_write(path: str | Path, data: str | bytes) -> None:
    """Create ``path`` with ``data`` atomically, failing with FileExistsError if it exists.

    The data goes to a temporary file first and is then hard-linked into place
    (``link`` fails when the target exists), so the file appears complete or not at all.
    """
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _write_temp(p, raw)
    try:
        os.link(tmp, p)
    except FileExistsError:
        raise FileExistsError(f"{p} already exists; refusing to overwrite") from None
    finally:
        os.unlink(tmp)


@contextmanager
def streaming_write(path: str | Path, *, exclusive: bool = True,
                    gzip_output: bool = False) -> Iterator[IO[bytes]]:
    """Stream bytes into ``path`` without ever exposing a partial file.

    Yields a binary file object on a temporary file beside ``path`` (gzip-compressed, with
    mtime 0 so equal content gives equal bytes, when ``gzip_output``). When the block exits
    normally the data is fsynced and the file appears at ``path`` in one step: hard-linked
    (``exclusive``: FileExistsError when ``path`` exists, nothing overwritten) or
    ``os.replace``-d. On any error the temporary file is removed and ``path`` is untouched.
    """
    import gzip

    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + p.name + ".", suffix=".tmp", dir=p.parent)
    raw = os.fdopen(fd, "wb")
    try:
        if gzip_output:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw
        raw.flush()
        os.fsync(raw.fileno())
        raw.close()
        if exclusive:
            try:
                os.link(tmp, p)
            except FileExistsError:
                raise FileExistsError(f"{p} already exists; refusing to overwrite") from None
        else:
            os.replace(tmp, p)
    finally:
        if not raw.closed:
            raw.close()
        if os.path.exists(tmp):
            os.unlink(tmp)


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n"


def package_root() -> Path:
    """Directory that holds the ``engram_eval`` package (hashed source paths are relative to
    it)."""
    return Path(__file__).resolve().parent.parent
