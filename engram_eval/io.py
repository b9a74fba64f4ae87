"""Small file helpers: atomic replacement, exclusive creation, hashing, JSON lines.

Operating-system failures while writing (read-only file system, disk full, a name too
long, a parent that is a file, permission denied) surface as one :class:`WriteError` (an
``OSError`` whose message names the output path and what is wrong; :func:`storage_errors`),
never as a raw ``OSError`` chain. The layers above turn it into
:class:`engram_eval.errors.StorageError` with a hint of what to do (this module sits beside
``errors`` and may not import it).

Removals and output paths are contained (:func:`remove_contained`, :func:`refuse_links`):
whatever this package removes (a temporary file or directory, an output it created a
moment ago, a stale staging directory) lies strictly inside the output's own directory
and is reached through real directories only; a symbolic link is removed as a link, never
followed (the directory it points to is never emptied). A symbolic link where an output
goes, dangling or not, is refused with one :class:`UnsafePathError` naming it, never
written through nor silently replaced.
"""

from __future__ import annotations

import errno as _errno
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a regular file (:func:`open_regular`: a FIFO or device is refused, never
    read forever)."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def canonical_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, ASCII only (for hashing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("ascii")).hexdigest()


# -- operating-system errors ---------------------------------------------------------------
class WriteError(OSError):
    """An operating-system failure while writing ``path``; ``str()`` is one line naming the
    path and what is wrong, ``errno`` the original error number."""

    def __init__(self, path: str | Path, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = str(path)
        self.message = message
        self.errno = errno

    def __str__(self) -> str:
        return self.message


class UnsafePathError(WriteError):
    """A path this package refuses to write, replace or remove: a symbolic link where an
    output goes (:func:`refuse_links`), or a removal outside the output's own directory or
    through a symbolic link (:func:`remove_contained`). ``str()`` is one line naming the
    path; nothing was written or removed. Not a storage error (:func:`is_storage_error`),
    so the layers above pass it on as it is."""


#: errno values that say "this output cannot be written there" (mapped to WriteError).
STORAGE_ERRNOS = frozenset(
    getattr(_errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM",
                                 "ENAMETOOLONG", "ENOTDIR", "ELOOP", "EISDIR", "EEXIST")
    if hasattr(_errno, n))
_FULL = frozenset(getattr(_errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(_errno, n))


def _existing_ancestor(path: Path) -> Path:
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def blocking_file(path: str | Path) -> Path | None:
    """The first ancestor of ``path`` that exists but is not a directory (None if none)."""
    p = Path(os.path.abspath(path)).parent
    while True:
        if os.path.lexists(p):
            return None if p.is_dir() else p
        if p == p.parent:
            return None
        p = p.parent


def name_max(path: str | Path) -> int:
    """The longest file name (bytes) the file system holding ``path`` allows (255 if unknown)."""
    anc = _existing_ancestor(Path(path))
    try:
        return int(os.pathconf(anc if anc.is_dir() else anc.parent, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def describe_os_error(e: OSError, path: str | Path) -> str:
    """What went wrong, in words, for an ``OSError`` met while writing ``path``."""
    code = e.errno
    if code in _FULL:
        what = {getattr(_errno, "EDQUOT", -1): "disk quota exceeded",
                _errno.EFBIG: "file too large for the file system"}.get(code, "no space left on "
                                                                         "device")
        return what
    if code == _errno.EROFS:
        return "read-only file system"
    if code in (_errno.EACCES, _errno.EPERM):
        return "permission denied"
    if code == _errno.ENAMETOOLONG:
        parts = [x for x in Path(os.path.abspath(path)).parts if x != "/"]
        longest = max(parts, key=lambda x: len(os.fsencode(x)), default=str(path))
        shown = longest if len(longest) <= 40 else longest[:40] + "..."
        return (f"file name too long ({len(os.fsencode(longest))} bytes in {shown!r}; this "
                f"file system allows {name_max(path)} per name)")
    if code in (_errno.ENOTDIR, _errno.EEXIST):
        blocker = blocking_file(path)
        if blocker is not None:
            return f"{blocker} is a file, not a directory"
    if code == _errno.ELOOP:
        return "too many levels of symbolic links"
    if code == _errno.EISDIR:
        return "it is a directory"
    return e.strerror or str(e)


def _own_message(e: BaseException) -> bool:
    """Whether ``e`` already says what is wrong in one line naming its path (a WriteError,
    or a StorageError of a layer above): that message is kept."""
    return isinstance(getattr(e, "message", None), str)


def storage_message(e: OSError, path: str | Path, action: str = "write",
                    hint: str = "") -> str:
    """"cannot ACTION PATH: what is wrong[; hint]" for ``e`` (an error that already says so
    keeps its message, with ``hint`` added)."""
    msg = str(e) if _own_message(e) else f"cannot {action} {path}: {describe_os_error(e, path)}"
    if hint and hint not in msg:
        msg += f"; {hint}"
    return msg


def storage_error(e: OSError, path: str | Path, action: str = "write", hint: str = "",
                  cls: type[OSError] | None = None) -> OSError:
    """A :class:`WriteError` (or ``cls``, built as ``cls(path, message, errno)``: the layers
    above pass :class:`engram_eval.errors.StorageError`) for ``e``: "cannot ACTION PATH: what
    is wrong[; hint]". An error that already says so and carries ``hint`` is returned as it
    is (a StorageError is never turned back into a WriteError)."""
    if _own_message(e) and (not hint or hint in str(e)) and (
            cls is None or isinstance(e, cls) or not isinstance(e, WriteError)):
        return e
    return (cls or WriteError)(getattr(e, "path", None) or path,  # type: ignore[call-arg]
                               storage_message(e, path, action, hint), e.errno)


def is_storage_error(e: BaseException) -> bool:
    """True for an ``OSError`` that says an output cannot be written there (a
    :class:`WriteError` included; an exclusive-creation refusal, FileExistsError, and a
    refused path, :class:`UnsafePathError`, not: no "free space" hint fits them)."""
    if isinstance(e, UnsafePathError):
        return False
    if isinstance(e, WriteError):
        return True
    if not isinstance(e, OSError) or isinstance(e, FileExistsError):
        return False
    return e.errno in STORAGE_ERRNOS


@contextmanager
def storage_errors(path: str | Path, action: str = "write", hint: str = "",
                   cls: type[OSError] | None = None) -> Iterator[None]:
    """Turn an operating-system write failure inside the block into one :class:`WriteError`
    (or ``cls``, see :func:`storage_error`) naming ``path``; other exceptions pass through."""
    try:
        yield
    except OSError as e:
        if is_storage_error(e):
            made = storage_error(e, path, action, hint, cls)
            if made is e:
                raise
            raise made from None
        raise


def make_parent(path: str | Path) -> None:
    """Create the directory that will hold ``path`` (and its parents), with a clear error
    when a parent is a file or cannot be created."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if isinstance(e, FileExistsError) or e.errno in STORAGE_ERRNOS:
            raise WriteError(path, f"cannot create {path}: "
                             + describe_os_error(OSError(e.errno, e.strerror), path),
                             e.errno) from None
        raise


def check_name_lengths(paths: Iterator[str | Path] | list[Path] | tuple[Path, ...],
                       hint: str = "choose a shorter output name") -> None:
    """Refuse, before anything is written, a path whose file name is longer than its file
    system allows (an output's sidecar adds ``.metadata.json`` to its name)."""
    for p in paths:
        p = Path(p)
        n = len(os.fsencode(p.name))
        limit = name_max(p)
        if n > limit:
            raise WriteError(p, f"cannot create {p}: file name too long ({n} bytes; this file "
                             f"system allows {limit} per name); {hint}", _errno.ENAMETOOLONG)


def _temp_prefix(name: str) -> str:
    """``.NAME.`` for a temporary file beside NAME, cut so the temporary name (prefix, 8
    random characters, ``.tmp``) stays under the usual 255-byte limit."""
    raw = os.fsencode(name)
    if len(raw) > 200:
        name = os.fsdecode(raw[:200])
    return "." + name + "."


def _write_temp(path: Path, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(tmp, path.parent)
        raise
    return tmp


class NotRegularFileError(OSError):
    """An input that is not a regular file (a FIFO, a device, a socket, a directory); ``str()``
    is one line naming it. An ``OSError``, so every reader's own error handling names it."""

    def __str__(self) -> str:
        return str(self.args[1]) if len(self.args) > 1 else super().__str__()


def _kind(mode: int) -> str:
    import stat

    for test, name in ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def input_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as an input file (``"file not found"``, ``"is a
    directory, not a regular file"``, a loop of symbolic links, ...), or None for a regular
    file. Never opens it."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as e:  # as os.path.exists: whatever cannot be stat-ed is not found
        link = link_problem(path)  # a dangling link says where it points
        if e.errno == _errno.ELOOP:  # not missing: it never resolves
            return link or "lies behind a loop of symbolic links (it never resolves)"
        return "file not found" + (f" ({link})" if link else "")
    return None if stat.S_ISREG(mode) else f"is a {_kind(mode)}, not a regular file"


#: The files SQLite keeps beside a database ``X``: ``X-wal``, ``X-shm``, ``X-journal``.
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def database_problem(path: str | Path) -> str | None:
    """Why the SQLite database ``path`` cannot be opened safely, or None: the database or
    one of the files SQLite keeps beside it (:data:`SQLITE_SIDE_SUFFIXES`) is a symbolic
    link (SQLite would read or create the file it points to, outside this directory) or
    exists and is not a regular file (a FIFO would hang SQLite's reads, a device feed it
    garbage). ``"P: is a ..."`` naming the offending file. Never opens anything."""
    import stat

    for p in (str(path), *(str(path) + s for s in SQLITE_SIDE_SUFFIXES)):
        problem = link_problem(p)
        if problem is not None:
            return f"{p}: {problem}"
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{p}: cannot inspect it ({describe_os_error(e, p)})"
        if not stat.S_ISREG(mode):
            return f"{p}: is a {_kind(mode)}, not a regular file"
    return None


def open_regular(path: str | Path) -> BinaryIO:
    """Open an input for reading bytes, refusing anything but a regular file before a byte is
    read: the open does not block (a FIFO with no writer would hang it) and ``fstat`` of the
    opened descriptor decides (no race with a swapped path). Raises
    :class:`NotRegularFileError` naming the file and what it is."""
    import errno
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(errno.EINVAL, f"{path}: is a {_kind(mode)}, not a "
                                      "regular file; inputs must be regular files")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_text(path: str | Path, limit: int | None = None) -> str:
    """The UTF-8 text of a regular file (:func:`open_regular`); with ``limit``, a file of more
    bytes is a ValueError naming it, checked while reading."""
    with open_regular(path) as f:
        raw = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(raw) > limit:
        raise ValueError(f"{path}: more than {limit} bytes")
    return raw.decode("utf-8")


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace`` (readers see the
    old or the new file, never a torn one). Use only for files this run owns.

    A failure (disk full, read-only file system, ...) leaves ``path`` as it was, removes the
    temporary file and raises one :class:`WriteError` naming ``path``."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    refuse_links(p)  # replacing a link would silently drop it (or a dangling one)
    with storage_errors(p, "write"):
        tmp = _write_temp(p, raw)
        try:
            os.replace(tmp, p)
        except BaseException:
            _unlink_quietly(tmp, p.parent)
            raise


def already_exists(path: str | Path, rest: str = "refusing to overwrite") -> str:
    """The message refusing an output ``path`` that exists: ``"P already exists; <rest>"``,
    or, for a directory where an output file was asked for, that it is a directory (one
    clear error, not "already exists" nor a resume hint)."""
    if os.path.isdir(path) and not os.path.islink(path):
        return (f"{path} is a directory where an output file goes; choose another output "
                "name (nothing was written)")
    return f"{path} already exists; {rest}"


def exclusive_write(path: str | Path, data: str | bytes) -> None:
    """Create ``path`` with ``data`` atomically, failing with FileExistsError if it exists.

    The data goes to a temporary file first and is then hard-linked into place
    (``link`` fails when the target exists), so the file appears complete or not at all.
    A symbolic link at ``path`` (dangling or not) is one :class:`UnsafePathError`.
    Operating-system failures raise one :class:`WriteError` naming ``path``.
    """
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    refuse_links(p)
    with storage_errors(p, "create"):
        tmp = _write_temp(p, raw)
        try:
            os.link(tmp, p)
        except FileExistsError:
            raise FileExistsError(already_exists(p)) from None
        finally:
            _unlink_quietly(tmp, p.parent)


def write_or_print(output: str | Path | None, text: str) -> None:
    """A command's text result: to the new file ``output`` (:func:`exclusive_write`), or to
    standard output when none is given."""
    if output:
        exclusive_write(output, text)
    else:
        sys.stdout.write(text)


def _unlink_quietly(path: str | Path, root: str | Path) -> None:
    """Remove this call's own temporary file ``path`` inside ``root`` (gone already: fine)."""
    remove_contained(path, root, recursive=False)


# -- contained removal and output paths ----------------------------------------------------
def link_problem(path: str | Path) -> str | None:
    """``"is a symbolic link (to 'T')"`` (with ``", which does not exist"`` for a dangling
    one, ``"), in a loop of symbolic links that never resolves"`` for a loop) when ``path``
    itself is a symbolic link, else None. Never follows it."""
    if not os.path.islink(path):
        return None
    try:
        target = os.readlink(path)
    except OSError:  # pragma: no cover - replaced in between
        target = "?"
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == _errno.ELOOP:
            return f"is a symbolic link (to {target!r}) in a loop of symbolic links that never " \
                "resolves"
        return f"is a symbolic link (to {target!r}, which does not exist)"
    return f"is a symbolic link (to {target!r})"


def refuse_links(*paths: str | Path, what: str = "an output path") -> None:
    """Refuse, before anything is written, a symbolic link (dangling or not) at any of
    ``paths`` (a result, sidecar, summary, plot, ...): one :class:`UnsafePathError` naming
    it. Writing through the link would change a file outside the output's directory;
    replacing it would silently drop it."""
    for p in paths:
        problem = link_problem(p)
        if problem is not None:
            raise UnsafePathError(p, f"{p}: {problem}; {what} must be a plain file or "
                                  "absent: remove the link (nothing was written)",
                                  _errno.EEXIST)


def check_output_dir(path: str | Path) -> None:
    """Refuse, before anything is written, an output directory ``path`` that new files cannot
    go into safely, with one error naming it: a symbolic link there (dangling or not: the
    files would land in its target; :class:`UnsafePathError`), or an existing path that is
    not a directory (:class:`WriteError`, "it is a file, not a directory"). A parent that is
    a file is :func:`make_output_dir`'s to say."""
    import stat

    p = Path(path)
    problem = link_problem(p)
    if problem is not None:
        raise UnsafePathError(p, f"{p}: {problem}; an output directory must be a real "
                              "directory or absent (nothing was written into it or its "
                              "target)", _errno.EEXIST)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return
    if not stat.S_ISDIR(mode):
        kind = "file" if stat.S_ISREG(mode) else _kind(mode)
        raise WriteError(p, f"cannot use {p} as an output directory: it is a {kind}, not a "
                         "directory; choose another (nothing was written)", _errno.ENOTDIR)


def make_output_dir(path: str | Path) -> Path:
    """The output directory ``path``, created with its parents if absent, after
    :func:`check_output_dir`; a parent that is a file (or any failure to create it) is one
    :class:`WriteError` naming it."""
    p = Path(path)
    check_output_dir(p)
    with storage_errors(p, "create"):
        try:
            p.mkdir(parents=True)
        except FileExistsError:  # there already (or made in between): checked again
            check_output_dir(p)
    return p


def _refused(path: str | Path, root: str | Path, why: str) -> UnsafePathError:
    return UnsafePathError(path, f"refusing to remove {path}: {why} (what this package "
                           f"removes lies inside {root}, reached through real directories "
                           "only); nothing was removed", _errno.EPERM)


def contained_path(path: str | Path, root: str | Path) -> Path:
    """``path`` rebuilt under the real location of ``root``, after checking that it lies
    strictly inside ``root`` (paths taken as written, made absolute by
    ``os.path.abspath``) and that no directory between ``root`` and it is a symbolic link
    (``root``'s own links are the caller's choice and kept). Raises
    :class:`UnsafePathError` otherwise."""
    import stat

    real_root = Path(os.path.realpath(root))
    p = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(root)), real_root):
        if p != base and p.is_relative_to(base):
            rel = p.relative_to(base)
            break
    else:
        raise _refused(path, root, f"it is not inside {root}")
    cur = real_root
    for part in rel.parts[:-1]:
        cur = cur / part
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            break  # nothing below it to remove
        if stat.S_ISLNK(mode):
            raise _refused(path, root, f"{cur} is a symbolic link")
    return real_root.joinpath(*rel.parts)


def remove_contained(path: str | Path, root: str | Path, *, recursive: bool = True,
                     ignore_errors: bool = False) -> bool:
    """Remove ``path``, which must lie inside ``root``, the output's own directory
    (:func:`contained_path`; else :class:`UnsafePathError` and nothing is removed).

    A symbolic link is removed as a link (its target is never touched); a directory is
    removed with its contents when ``recursive`` (``shutil.rmtree``, which removes the
    links inside it as links), else only when empty (``os.rmdir``). A missing ``path`` is
    nothing to do. Returns whether something was removed. ``ignore_errors``: an
    operating-system failure of the removal itself is ignored (a refusal never is)."""
    import shutil
    import stat

    target = contained_path(path, root)
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode):
            if recursive:
                shutil.rmtree(target)
            else:
                os.rmdir(target)
        else:  # a file or a link (never followed)
            os.unlink(target)
    except FileNotFoundError:
        return False
    except OSError:
        if ignore_errors:
            return False
        raise
    return True


class _GuardedFile:
    """A binary file whose write/flush failures are WriteErrors naming the final path."""

    def __init__(self, f: IO[bytes], path: Path) -> None:
        self._f = f
        self._path = path

    def write(self, data: Any) -> int:
        with storage_errors(self._path, "write"):
            return self._f.write(data)

    def flush(self) -> None:
        with storage_errors(self._path, "write"):
            self._f.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextmanager
def streaming_write(path: str | Path, *, exclusive: bool = True,
                    gzip_output: bool = False) -> Iterator[IO[bytes]]:
    """Stream bytes into ``path`` without ever exposing a partial file.

    Yields a binary file object on a temporary file beside ``path`` (gzip-compressed, with
    mtime 0 so equal content gives equal bytes, when ``gzip_output``). When the block exits
    normally the data is fsynced and the file appears at ``path`` in one step: hard-linked
    (``exclusive``: FileExistsError when ``path`` exists, nothing overwritten) or
    ``os.replace``-d. A symbolic link at ``path`` is refused first (:func:`refuse_links`).
    On any error the temporary file is removed and ``path`` is untouched;
    a write failure of the operating system (disk full, ...) is one :class:`WriteError`
    naming ``path``.
    """
    import gzip

    p = Path(path)
    refuse_links(p)
    with storage_errors(p, "create"):
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(p.name), suffix=".tmp", dir=p.parent)
    raw = os.fdopen(fd, "wb")
    sink: Any = _GuardedFile(raw, p)
    try:
        if gzip_output:
            with gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) as gz:
                yield gz  # type: ignore[misc]
        else:
            yield sink
        with storage_errors(p, "write"):
            raw.flush()
            os.fsync(raw.fileno())
            raw.close()
            if exclusive:
                try:
                    os.link(tmp, p)
                except FileExistsError:
                    raise FileExistsError(already_exists(p)) from None
            else:
                os.replace(tmp, p)
    finally:
        if not raw.closed:
            try:
                raw.close()
            except OSError:
                pass  # buffered bytes of a failed write; the file is removed below
        _unlink_quietly(tmp, p.parent)


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n"


#: What :func:`printable` escapes: every C0 control (newline and tab included: a table cell
#: is one line), DEL, every C1 control (``\x9b`` starts an ANSI sequence as ``\x1b[`` does)
#: and the bidirectional marks and overrides that reorder what a terminal shows.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` (a dataset string: a question type, id, ...) as it may be printed into a
    terminal table: each character of :data:`_UNPRINTABLE` written as its Python escape
    (``\x1b``, ``\n``, ``\u202e``), so an ANSI sequence in a dataset cannot recolour the
    table, move the cursor, hide lines or break a row. Other text is unchanged."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def package_root() -> Path:
    """Directory that holds the ``engram_eval`` package (hashed source paths are relative to
    it)."""
    return Path(__file__).resolve().parent.parent


@contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """An exclusive advisory lock (``flock``) on ``<path>.lock`` for the ``with`` block;
    ``path``'s directory is created if needed. Serialises read-modify-write of one small
    JSON file (the held-out ledger, the held-out registry) between processes."""
    import fcntl

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(str(p) + ".lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
