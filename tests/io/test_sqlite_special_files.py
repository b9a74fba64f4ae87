"""SQLite files that are not regular files (issue 28, "hang or unbounded memory" and "data
lost / path escape"): the embedding cache (``cache.v2.sqlite3`` in ``--cache-dir``) and the
production memory store. A FIFO, ``/dev/zero``, a directory or a symbolic link (dangling
or not) where the database, or a file SQLite keeps beside it (``-wal``, ``-shm``,
``-journal``), is expected ends in one clear error naming that file, before SQLite opens
anything: no hang (SQLite reading a FIFO it holds open for writing never returns), no file
created through a link, and the directory left as it was. Each case runs in a subprocess
with a timeout, so a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import special_files

from engram_eval.io import SQLITE_SIDE_SUFFIXES
from engram_eval.retrieval.cache import CACHE_FILE

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60


OPEN = {
    "cache": "from engram_eval.retrieval.cache import VectorCache\n"
             "VectorCache(d)\n",
    "store-open": "from engram_eval.production.store import MemoryStore\n"
                  "MemoryStore.open(d / 'store.sqlite3', None)\n",
    "store-create": "from engram_eval.production.store import MemoryStore\n"
                    "MemoryStore.create(d / 'store.sqlite3', None)\n",
}


def _open_in_subprocess(which: str, directory: Path) -> subprocess.CompletedProcess[str]:
    code = ("import sys\nfrom pathlib import Path\nd = Path(sys.argv[1])\n"
            "from engram_eval.errors import EngramEvalError\n"
            "from engram_eval.io import UnsafePathError\n"
            "try:\n" + "".join("    " + line + "\n" for line in OPEN[which].splitlines())
            + "except (EngramEvalError, UnsafePathError) as e:\n"
            "    print(type(e).__name__ + ': ' + str(e)); sys.exit(3)\n"
            "print('opened'); sys.exit(0)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, str(directory)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def _listing(d: Path) -> dict[str, str]:
    """Every name in ``d`` with what it is (a link's target), to compare before and after."""
    return {n: (f"link:{os.readlink(d / n)}" if (d / n).is_symlink() else
                "dir" if (d / n).is_dir() else f"{os.lstat(d / n).st_mode:o}:"
                f"{os.lstat(d / n).st_size}") for n in sorted(os.listdir(d))}


#: (what is opened, which of its files is special): every file of the cache, the store's
#: database and one side file (the check is the same function).
WHERE = [("cache", s) for s in ("", *SQLITE_SIDE_SUFFIXES)] + [
    (w, s) for w in ("store-create", "store-open") for s in ("", "-wal")]


@pytest.mark.parametrize("kind", special_files.LINK_KINDS)
@pytest.mark.parametrize(("which", "suffix"), WHERE)
def test_a_special_sqlite_file_is_one_clear_error(which: str, kind: str, suffix: str,
                                                  tmp_path: Path) -> None:
    name = (CACHE_FILE if which == "cache" else "store.sqlite3") + suffix
    target = tmp_path / name
    special_files.make(kind, target)
    says = special_files.LINK_SAYS[kind]
    before = _listing(tmp_path)
    done = _open_in_subprocess(which, tmp_path)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert f"{target}: " in lines[0] and says in lines[0], lines[0]
    assert _listing(tmp_path) == before  # nothing created, through a link or beside it


def test_a_regular_cache_still_opens(tmp_path: Path) -> None:
    import numpy as np

    from engram_eval.retrieval.cache import VectorCache

    cache = VectorCache(tmp_path)
    cache.put_vectors({"k": np.ones(4, dtype=np.float32)})
    assert list(cache.get_vectors(["k"])) == ["k"]
    cache.close()
    assert VectorCache(tmp_path).get_vectors(["k"])["k"].tolist() == [1.0] * 4
