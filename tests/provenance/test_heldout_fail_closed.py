"""The held-out registry fails closed (issue 43): a registry that exists but cannot be read
whole -- over the size limit, truncated, ``[]``, a directory, a link to /dev/zero, a dangling
link, another kind of document, a malformed entry -- is one error naming the registry and what
to do, for every command that asks the held-out guard; it is never silently ignored, and
nothing is written. Only a registry that does not exist at all is empty.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from frozen_runs import run_dummy

from engram_eval.cli import main as cli
from engram_eval.provenance import registry as R

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "longmemeval_tiny.json"
LOCOMO_TINY = REPO / "fixtures" / "locomo_tiny.json"


def _valid_registry(tmp: Path) -> bytes:
    """The bytes of a real registry: `engram-eval split` of the tiny fixture writes it."""
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "fc",
                     "--output-dir", str(tmp / "split"), "--compress", "none"]) == 0
    return R.registry_path().read_bytes()


def _corrupt(kind: str, reg: Path, tmp: Path) -> str:
    """Make the registry at ``reg`` broken in the way ``kind`` names; returns the words the
    error must hold."""
    if kind == "oversize":  # a sparse file one byte over the limit
        with open(reg, "wb") as f:
            f.write(b'{"kind": "engram-eval/heldout-registry", "parts": {}}')
            f.truncate(R.MAX_REGISTRY_BYTES + 1)
        return f"over the limit of {R.MAX_REGISTRY_BYTES}"
    if kind == "truncated":
        good = _valid_registry(tmp)
        reg.write_bytes(good[: len(good) // 2])
        return "cannot be read as JSON"
    if kind == "empty_file":
        reg.write_bytes(b"")
        return "cannot be read as JSON"
    if kind == "empty_list":
        reg.write_text("[]")
        return "is not a JSON object"
    if kind == "directory":
        reg.mkdir()
        return "is a directory"
    if kind == "dev_zero":
        reg.symlink_to("/dev/zero")
        return "not a regular file"
    if kind == "dangling_link":
        reg.symlink_to(tmp / "gone.json")
        return "does not exist"
    if kind == "other_kind":
        reg.write_text(json.dumps({"kind": "engram-eval/heldout-ledger", "inputs": {}}))
        return "has kind 'engram-eval/heldout-ledger'"
    if kind == "bad_entry":
        doc = json.loads(_valid_registry(tmp))
        key = next(iter(doc["parts"]))
        doc["parts"][key]["question_keys"] = "not a list"
        reg.write_text(json.dumps(doc))
        return f"part {key}: field 'question_keys' is not a list of strings"
    raise AssertionError(kind)


def _state(p: Path) -> object:
    """What the registry path is now (so a test can see that nothing changed it)."""
    if p.is_symlink():
        return ("link", os.readlink(p))
    if p.is_dir():
        return ("dir", sorted(x.name for x in p.iterdir()))
    return ("file", p.stat().st_size, p.read_bytes()[:4096])


KINDS = ["oversize", "truncated", "empty_file", "empty_list", "directory", "dev_zero",
         "dangling_link", "other_kind", "bad_entry"]


def _one_error(err: str, reg: Path, words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    assert str(reg) in lines[0] and "held-out registry" in lines[0] and words in lines[0]
    assert "move it aside" in lines[0] and R.ENV_REGISTRY in lines[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_broken_registry_refuses_every_guarded_command(tmp_path, capsys, kind):
    reg = R.registry_path()
    words = _corrupt(kind, reg, tmp_path)
    capsys.readouterr()
    before = _state(reg)
    # run of data the registry has nothing to do with: still refused (the guard cannot tell)
    out = tmp_path / "r.jsonl"
    assert run_dummy(str(LOCOMO_TINY), "--output", str(out)) == 2
    _one_error(capsys.readouterr().err, reg, words)
    assert not out.exists() and not Path(str(out) + ".metadata.json").exists()
    # split refuses before writing a part, and does not replace the registry
    split = tmp_path / "again"
    assert cli.main(["split", str(LOCOMO_TINY), "--holdout", "0.5", "--salt", "x",
                     "--output-dir", str(split)]) == 2
    _one_error(capsys.readouterr().err, reg, words)
    assert not split.exists() or not any(split.iterdir())
    # the commands that show and forget parts say the same
    assert cli.main(["heldout", "list"]) == 2
    _one_error(capsys.readouterr().err, reg, words)
    assert cli.main(["heldout", "forget", "0" * 64, "--reason", "x"]) == 2
    _one_error(capsys.readouterr().err, reg, words)
    # a choosing command's guard too
    assert cli.main(["make-stress", str(TINY), "--sessions", "6", "--seed", "1",
                     "--output", str(tmp_path / "s.json")]) == 2
    _one_error(capsys.readouterr().err, reg, words)
    assert not (tmp_path / "s.json").exists()
    assert _state(reg) == before  # nothing wrote to (or replaced) the registry


def test_an_absent_registry_is_empty_and_is_not_created(tmp_path, capsys):
    reg = R.registry_path()
    assert not os.path.lexists(reg)
    assert run_dummy(str(TINY), "--output", str(tmp_path / "r.jsonl")) == 0
    assert cli.main(["heldout", "list"]) == 0
    assert "0 registered part(s) (no registry file yet)" in capsys.readouterr().out
    assert not os.path.lexists(reg)


def test_a_registry_under_the_default_state_directory(tmp_path, monkeypatch, capsys):
    """Without $ENGRAM_EVAL_HELDOUT_REGISTRY the registry is
    $XDG_STATE_HOME/engram-eval/heldout_registry.json, and fails closed there too."""
    monkeypatch.delenv(R.ENV_REGISTRY)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    reg = tmp_path / "state" / "engram-eval" / "heldout_registry.json"
    assert R.registry_path() == reg
    reg.parent.mkdir(parents=True)
    reg.write_text("[]")
    assert run_dummy(str(TINY), "--output", str(tmp_path / "r.jsonl")) == 2
    _one_error(capsys.readouterr().err, reg, "is not a JSON object")
