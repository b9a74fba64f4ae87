"""Systems from outside the package, for the tests: the two examples of ``examples/systems/``
made importable (``py:`` path) or installed as a distribution with an entry point (a
``*.dist-info`` folder written on ``sys.path``, which :mod:`importlib.metadata` reads as it
reads any installed package), and a spy system that records what it was shown."""

from __future__ import annotations

import base64
import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "systems"
LEAK_SRC = EXAMPLES / "prefix_leak" / "engram_prefix_leak"
BM25S_SRC = EXAMPLES / "bm25s_system" / "engram_bm25s"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "longmemeval_tiny.json"


def forget(module: str) -> None:
    """Drop ``module`` and its submodules from ``sys.modules`` (each test imports its own)."""
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        del sys.modules[name]


def importable(monkeypatch: pytest.MonkeyPatch, src: Path) -> str:
    """Put the folder holding package ``src`` on ``sys.path``; its name for ``py:``."""
    monkeypatch.syspath_prepend(str(src.parent))
    forget(src.name)
    return src.name


def _record_line(site: Path, rel: str) -> str:
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def install(monkeypatch: pytest.MonkeyPatch, site: Path, src: Path = LEAK_SRC, *,
            dist: str = "engram-prefix-leak", version: str = "1.0.0",
            entry: str = "prefix-leak", target: str = "engram_prefix_leak:make_system") -> Path:
    """Install package ``src`` into ``site`` as distribution ``dist`` ``version`` with the
    entry point ``entry = target`` in group ``engram_eval.retrievers`` (what pip writes:
    the package, and a dist-info with METADATA, entry_points.txt and RECORD), and put
    ``site`` on ``sys.path``. Returns ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    pkg = site / src.name
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for old in site.glob(f"{dist.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[engram_eval.retrievers]\n{entry} = {target}\n")
    files = sorted(p.relative_to(site).as_posix() for p in pkg.rglob("*.py"))
    files += [f"{info.name}/METADATA", f"{info.name}/entry_points.txt"]
    lines = [_record_line(site, f) for f in files] + [f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    if str(site) not in sys.path:
        monkeypatch.syspath_prepend(str(site))
    forget(src.name)
    return site


# --------------------------------------------------------------------------- a spy system
SEEN: list[dict[str, Any]] = []
#: Set by a test: the spy's search raises on its N-th call (a crash mid-run), or returns a
#: reply ``BAD(reply)`` changes.
FAIL_AT: list[int] = []
BAD: list[Any] = []


class Spy:
    """Ranks sessions by the number of question words their text shares, ties by the order
    given; records every document it is sent (:data:`SEEN`)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.docs: list[dict[str, Any]] = []

    def index(self, haystack: dict[str, Any]) -> None:
        SEEN.append({"index": haystack})
        self.docs = haystack["sessions"]

    def search(self, query: dict[str, Any]) -> Any:
        SEEN.append({"search": query})
        n = sum(1 for s in SEEN if "search" in s)
        if FAIL_AT and n == FAIL_AT[0]:
            raise RuntimeError("the spy crashes here, as a system may")
        words = set(query["question"]["text"].lower().split())

        def overlap(doc: dict[str, Any]) -> int:
            return sum(len(words & set(t["content"].lower().split())) for t in doc["turns"])

        order = sorted(range(len(self.docs)), key=lambda i: (-overlap(self.docs[i]), i))
        reply = [{"id": self.docs[i]["id"], "score": float(overlap(self.docs[i]))}
                 for i in order]
        reply = BAD[0](reply) if BAD else reply
        SEEN.append({"reply": reply})
        return reply


def make_spy(settings: dict[str, Any]) -> Spy:
    return Spy(settings)
