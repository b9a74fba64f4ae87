"""The special files of the hostile-input tests (issue 28, "hang or unbounded memory" and
"traceback or misleading error"), made one way for every test that needs them: a FIFO with
no writer (an open that blocks, a read that never ends), ``/dev/zero`` (an endless stream,
reached through a symbolic link), a directory, a dangling symbolic link, a loop of symbolic
links (it never resolves: ``ELOOP``, not "missing") and a symbolic link to a regular file,
each made at the path an input (or a database) is expected.

:func:`make` makes one; :data:`SAYS` is what the one error of a reader that follows links
says about each (``open_regular`` and ``input_problem`` wording), :data:`LINK_SAYS` what a
reader that refuses links says instead (the SQLite files: nothing is opened through a
link). Tests that need a hang to fail rather than stall run the reader in a subprocess with
a timeout; that is theirs to do."""

from __future__ import annotations

import os
from pathlib import Path

#: The kinds every reader of an input must refuse.
KINDS = ("fifo", "dev-zero", "directory", "dangling-link", "link-loop")
#: ... and a link to a regular file, refused where links are (databases, outputs).
LINK_KINDS = (*KINDS, "link")

#: What one error line says about each kind, from a reader that follows links.
SAYS = {
    "fifo": "FIFO (named pipe), not a regular file",
    "dev-zero": "character device, not a regular file",
    "directory": "directory, not a regular file",
    "dangling-link": "which does not exist",
    "link-loop": "in a loop of symbolic links that never resolves",
}
#: What one error line says about each kind, from a reader that refuses links.
LINK_SAYS = {
    "fifo": "FIFO (named pipe), not a regular file",
    "dev-zero": "is a symbolic link (to '/dev/zero')",
    "directory": "is a directory, not a regular file",
    "dangling-link": "which does not exist",
    "link-loop": "in a loop of symbolic links that never resolves",
    "link": "is a symbolic link",
}


def make(kind: str, path: Path) -> Path:
    """Make a special file of ``kind`` at ``path`` (nothing may be there); returns ``path``.
    A link's target lies beside it (``<name>.missing``, ``<name>.real``), inside the test's
    directory."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling-link":
        os.symlink(path.parent / f"{path.name}.missing", path)
    elif kind == "link-loop":  # path -> path.loop -> path
        os.symlink(path.parent / f"{path.name}.loop", path)
        os.symlink(path, path.parent / f"{path.name}.loop")
    elif kind == "link":
        real = path.parent / f"{path.name}.real"
        real.write_bytes(b"")
        os.symlink(real, path)
    else:
        raise ValueError(f"no special file kind {kind!r} (kinds: {', '.join(LINK_KINDS)})")
    return path
