"""Frozen-source manifests and the held-out ledger (engram_eval.provenance.frozen)."""

from __future__ import annotations

import json

import pytest

from engram_eval.errors import ProvenanceError
from engram_eval.provenance import frozen as F


def _setup(tmp_path):
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "b.py").write_text("B = 2\n")
    model = {"role": "embedding", "name": "m", "path": "/x", "source": "path", "revision": "local",
             "files_sha256": {"model.safetensors": "0" * 64}, "sha256": "1" * 64}
    data = tmp_path / "input.json"
    data.write_text('{"x": 1}\n')
    return root, model, data


def _manifest(root, model, data, settings=None, runner="test"):
    return F.build_manifest(runner=runner, input_path=data, input_kind="fixture",
                            sources=F.hash_sources(["pkg/a.py", "pkg/b.py"], root),
                            models=[model], settings=settings or {"k": 1, "nested": {"w": 0.5}},
                            packages={"numpy": "2"})


def test_freeze_is_exclusive_and_check_passes_when_nothing_changed(tmp_path):
    root, model, data = _setup(tmp_path)
    m = _manifest(root, model, data)
    path = F.freeze(tmp_path / "frozen.json", m)
    with pytest.raises(ProvenanceError, match="never overwritten"):
        F.freeze(path, m)
    again = _manifest(root, model, data)
    assert again["fingerprint"] == m["fingerprint"]
    assert F.check_frozen(path, again)["fingerprint"] == m["fingerprint"]


def test_check_names_every_difference(tmp_path):
    root, model, data = _setup(tmp_path)
    path = F.freeze(tmp_path / "frozen.json", _manifest(root, model, data))
    (root / "pkg" / "a.py").write_text("A = 2\n")
    data.write_text('{"x": 2}\n')
    changed_model = dict(model, files_sha256={"model.safetensors": "2" * 64})
    now = _manifest(root, changed_model, data, settings={"k": 2, "nested": {"w": 0.5}})
    with pytest.raises(ProvenanceError) as e:
        F.check_frozen(path, now)
    msg = str(e.value)
    assert "source pkg/a.py" in msg
    assert "pkg/b.py" not in msg
    assert "model embedding m file model.safetensors" in msg
    assert "setting k: 1 -> 2" in msg
    assert "fixture input.json" in msg
    assert "4 difference(s)" in msg


def test_edited_manifest_is_refused(tmp_path):
    root, model, data = _setup(tmp_path)
    m = _manifest(root, model, data)
    path = F.freeze(tmp_path / "frozen.json", m)
    doc = json.loads(path.read_text())
    doc["settings"]["k"] = 5
    path.write_text(json.dumps(doc))
    with pytest.raises(ProvenanceError, match="edited"):
        F.load_manifest(path)


def test_ledger_labels(tmp_path):
    root, model, data = _setup(tmp_path)
    ledger = tmp_path / "results" / "ledger.json"
    pre_a = _manifest(root, model, data)
    pre_b = _manifest(root, model, data, settings={"k": 3, "nested": {"w": 0.5}})
    sha = pre_a["input"]["sha256"]
    assert F.ledger_label(ledger, sha, pre_a) == F.HELDOUT
    assert not ledger.exists()  # ledger_label writes nothing
    assert F.ledger_record(ledger, pre_a, output="o1") == F.HELDOUT
    # a second configuration frozen before the first run is still pre-registered
    assert F.ledger_record(ledger, pre_b, output="o2") == F.HELDOUT
    # a manifest frozen after the first run, against changed source: regression check
    (root / "pkg" / "b.py").write_text("B = 3\n")
    later = _manifest(root, model, data)
    assert later["source_fingerprint"] != pre_a["source_fingerprint"]
    assert F.ledger_label(ledger, sha, later) == F.REGRESSION
    assert F.ledger_record(ledger, later, output="o3") == F.REGRESSION
    doc = F.read_ledger(ledger)
    entry = doc["inputs"][sha]
    assert entry["first_run"]["source_fingerprint"] == pre_a["source_fingerprint"]
    assert [r["label"] for r in entry["runs"]] == [F.HELDOUT, F.HELDOUT, F.REGRESSION]
