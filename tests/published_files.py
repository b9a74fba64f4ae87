"""A published file's bytes for a test: from the tree, or, where the retention rule archived it
(issue 46), from git history at the commit the catalogue's archive names. A checkout without
that history (a shallow clone, an export) skips the test, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def published_bytes(path: str, root: Path = ROOT) -> bytes:
    """The bytes of the published file ``path`` (``results/...``, or a companion of one)."""
    from engram_eval.provenance import catalog as C

    here = root / path
    if here.is_file():
        return here.read_bytes()
    for a in C.load(root / C.CATALOG).get("archive", []):
        if path in (a["path"], *C.companions(a["path"])):
            blob = C.git_blob(root, str(a["at"]), path)
            if blob is None:
                pytest.skip(f"{path} is archived at {a['at']}, which this checkout's git "
                            "history lacks (a shallow clone?)")
            return blob
    raise FileNotFoundError(f"{path}: neither in the tree nor in the catalogue's archive")
