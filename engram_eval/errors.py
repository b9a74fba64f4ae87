"""Error types shared by loaders, the runner and the provenance checks.

Every error that is caused by bad input names the file, the record and the field, so a
user can fix the input without a debugger.
"""

from __future__ import annotations

from pathlib import Path


class EngramEvalError(Exception):
    """Base class: every error this package raises on purpose derives from it."""


class DataError(EngramEvalError, ValueError):
    """A dataset file is malformed.

    ``path`` is the file, ``record`` names the record (question id and/or list index),
    ``field`` is the offending field (a dotted / indexed path), ``reason`` says what is wrong.
    """

    def __init__(self, path: str | Path, record: str, field: str, reason: str) -> None:
        self.path = str(path)
        self.record = record
        self.field = field
        self.reason = reason
        super().__init__(f"{self.path}: record {record}: field {field!r}: {reason}")


class ConfigError(EngramEvalError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class ProvenanceError(EngramEvalError):
    """A run's provenance does not hold: overwrite, resume mismatch, corrupt rows."""


class InputError(DataError, ProvenanceError, ConfigError):
    """A file this package reads cannot be read as the JSON or JSON lines it must hold: not
    a regular file, more bytes (decompressed) than its limit, a line longer than its limit,
    nested deeper or holding a longer string than allowed, not UTF-8, not valid JSON.

    Raised by the one bounded reader (:mod:`engram_eval.data._jsonio`) for every file it
    reads: datasets, result rows, sidecars, summaries, manifests, the ledger, settings,
    calibrations, fixtures. ``path``, ``record`` (``"(file)"``, ``"line N"``, a record id)
    and ``field`` (``"(root)"`` when not known) name where, as :class:`DataError` does. It is
    also a :class:`ProvenanceError` and a :class:`ConfigError`, so the callers that reported
    an unreadable sidecar, rows file or calibration under those types keep catching it."""


class ModelUnavailableError(EngramEvalError):
    """A model is not available offline; the message says how to provide it."""


class StorageError(EngramEvalError, OSError):
    """Writing an output failed at the operating-system level (read-only file system, disk
    full, name too long, a parent that is a file, permission denied).

    The message names the path and says what to do; ``errno`` keeps the original error
    number. It is also an :class:`OSError`, so code that handles OS errors still does."""

    def __init__(self, path: str | Path, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = str(path)
        self.errno = errno
        self.message = message

    def __str__(self) -> str:
        return self.message


class CacheError(EngramEvalError):
    """The embedding/score cache cannot be trusted: an entry fails its checksum (the stored
    value was changed after it was written), or the database itself is damaged, of another
    layout, or cannot be opened. ``path`` is the cache file, ``key`` the entry (``""`` for the
    whole database); the message says how to go around it (``--no-use-cache``, another
    ``--cache-dir``) or rebuild it (delete it)."""

    def __init__(self, path: str | Path, key: str, message: str) -> None:
        self.path = str(path)
        self.key = key
        super().__init__(message)
