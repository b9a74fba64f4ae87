"""Issue 43, the production store (``engram-eval production store``) given careless input:

* empty or whitespace-only memory text, a key a memory does not have (``colour``, a
  misspelt ``data``), a date that is no date (``not-a-date``): one error naming the memory
  file, the memory and the field or key; no store is created;
* a disk that fills up during the first add (a real process under a small
  ``RLIMIT_FSIZE``): the error says nothing was kept and the store made for the add is
  gone (not left empty as if the add had happened); a retry works. Under an existing
  store, the same failure keeps the store's memories as they were, and says so.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.production.search import Engine
from engram_eval.production.settings import ProductionSettings
from engram_eval.production.store import MemoryStore

REPO = Path(__file__).resolve().parents[2]
LIMIT = 48 * 1024  # bytes a file of the limited process may reach (the empty store: ~20 KB)
BIG = " ".join(["w" * 4000] * 50)  # 200 KB of text in one memory, one piece


def _store_cli(db: Path, mems: Path, model: str, capsys: pytest.CaptureFixture[str]
               ) -> tuple[int, str]:
    rc = cli.main(["production", "store", str(db), "--memories", str(mems),
                   "--embedding-model", model])
    return rc, capsys.readouterr().err


def _one_line(rc: int, err: str, *needles: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.mark.parametrize(("memory", "record", "field", "says"), [
    ({"id": "a", "text": ""}, "memory 'a'", "text", "empty (or whitespace only)"),
    ({"id": "a", "text": " \t\n "}, "memory 'a'", "text", "empty (or whitespace only)"),
    ({"id": "a", "text": "tea", "colour": "red"}, "memory 'a' (index 1)", "colour",
     "not a key of a memory (keys: id, text, date)"),
    ({"id": "a", "text": "tea", "data": "2024-01-01"}, "memory 'a' (index 1)", "data",
     "not a key of a memory"),
    ({"id": "a", "text": "tea", "date": "not-a-date"}, "memory 'a'", "date",
     "'not-a-date' is not a calendar date"),
    ({"id": "a"}, "memory 'a' (index 1)", "text", "missing"),
])
def test_a_bad_memory_is_refused_before_a_store_exists(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_embedding_model: str,
        memory: dict[str, str], record: str, field: str, says: str) -> None:
    mems = tmp_path / "mems.json"
    mems.write_text(json.dumps([{"id": "ok", "text": "I like coffee."}, memory]))
    db = tmp_path / "store.sqlite"
    rc, err = _store_cli(db, mems, tiny_embedding_model, capsys)
    _one_line(rc, err, f"{mems}: record {record}: field {field!r}: {says}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mems.json"]


def _limited() -> None:  # in the child, before exec: writes past LIMIT fail with EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _store_limited(db: Path, mems: Path, model: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "production", "store",
                           str(db), "--memories", str(mems), "--embedding-model", model],
                          capture_output=True, text=True, preexec_fn=_limited, timeout=600,
                          cwd=REPO)  # this checkout's package


def test_disk_full_on_the_first_add_keeps_nothing_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_embedding_model: str) -> None:
    mems = tmp_path / "mems.json"
    mems.write_text(json.dumps([{"id": "big", "text": BIG, "date": "2024-03-02"}]))
    db = tmp_path / "store.sqlite"
    r = _store_limited(db, mems, tiny_embedding_model)
    _one_line(2 if r.returncode == 2 else -1, r.stderr, f"cannot write the memory store {db}",
              "nothing was kept: the store, created for this add, was removed",
              f"{db} does not exist", "run it again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mems.json"]  # no store, no journal
    rc, err = _store_cli(db, mems, tiny_embedding_model, capsys)  # the retry, space freed
    assert rc == 0, err
    with MemoryStore.open(db, Engine(ProductionSettings(
            embedding_model=tiny_embedding_model))) as store:
        assert [m.id for m in store.memories()] == ["big"] and store.memories()[0].text == BIG


def test_disk_full_under_an_existing_store_keeps_its_memories(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_embedding_model: str) -> None:
    first = tmp_path / "first.json"
    first.write_text(json.dumps([{"id": "a", "text": "I adopted a border collie."}]))
    db = tmp_path / "store.sqlite"
    rc, err = _store_cli(db, first, tiny_embedding_model, capsys)
    assert rc == 0, err
    more = tmp_path / "more.json"
    more.write_text(json.dumps([{"id": "big", "text": BIG}]))
    r = _store_limited(db, more, tiny_embedding_model)
    _one_line(2 if r.returncode == 2 else -1, r.stderr, f"cannot write the memory store {db}",
              "nothing of this add() was kept; the store holds what it held before")
    with MemoryStore.open(db, Engine(ProductionSettings(
            embedding_model=tiny_embedding_model))) as store:
        assert [m.id for m in store.memories()] == ["a"]
