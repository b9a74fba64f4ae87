"""`engram-eval run --frozen-source / --validate-only --freeze-source` (engram_eval.provenance.frozen)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from frozen_runs import freeze_and_run
from frozen_runs import run_dummy as _run

from engram_eval.io import sha256_file
from engram_eval.provenance import frozen as F

TINY = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(k, "1")
    data = tmp_path / "part.heldout.json"
    shutil.copy(TINY, data)
    return tmp_path, data


def _mark_heldout(data: Path) -> None:
    marker = {"split_manifest_sha256": "0" * 64, "part": "heldout",
              "part_sha256": sha256_file(data), "source_sha256": "1" * 64, "salt": "s"}
    Path(str(data) + ".split.json").write_text(json.dumps(marker))


def test_validate_only_freezes_and_frozen_run_records(env, capsys):
    tmp, data = env
    manifest = tmp / "frozen.json"
    assert _run(str(data), "--validate-only", "--freeze-source", str(manifest)) == 0
    assert not list(tmp.glob("*.jsonl"))
    assert _run(str(data), "--validate-only", "--freeze-source", str(manifest)) == 2
    out = tmp / "r.jsonl"
    assert _run(str(data), "--output", str(out), "--frozen-source", str(manifest)) == 0
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    summ = json.loads(Path(str(out) + ".summary.json").read_text())
    fp = F.load_manifest(manifest)["fingerprint"]
    assert side["frozen_source"]["manifest_fingerprint"] == fp
    assert summ["frozen_source"]["label"] == F.NOT_HELDOUT


def test_heldout_part_needs_matching_manifest(env, capsys):
    tmp, data = env
    _mark_heldout(data)
    out = tmp / "r.jsonl"
    assert _run(str(data), "--output", str(out)) == 2
    assert "held-out part" in capsys.readouterr().err
    assert not out.exists()
    manifest = tmp / "frozen.json"
    assert _run(str(data), "--validate-only", "--freeze-source", str(manifest)) == 0
    # a setting that differs from the frozen one is named, before anything is written
    assert _run(str(data), "--output", str(out), "--frozen-source", str(manifest),
                "--limit", "1") == 2
    assert "setting config.limit" in capsys.readouterr().err
    assert not out.exists()
    assert _run(str(data), "--output", str(out), "--frozen-source", str(manifest)) == 0
    summ = json.loads(Path(str(out) + ".summary.json").read_text())
    assert summ["frozen_source"]["label"] == F.HELDOUT
    ledger = json.loads((tmp / "ledger.json").read_text())
    assert list(ledger["inputs"]) == [sha256_file(data)]
    # a manifest frozen after the first run gives a regression check
    assert freeze_and_run(data, tmp, "r2").summary["frozen_source"]["label"] == F.REGRESSION
