"""``run --gold-overlay``: recorded with its hash, summaries on both golds, ``verify``
re-derives them, resume and merge keep them; ``compare`` and ``report`` on both golds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.io import sha256_file
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig
from engram_eval.runs.verify import AUDITED, verify
from engram_eval.scoring.score import score

ROOT = Path(__file__).resolve().parents[2]
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
AUDIT = ROOT / "fixtures" / "locomo_tiny_audit.json"


def _run(out: Path, retriever: str = "flat-bm25", **kw) -> runner.RunOutcome:
    return runner.run(RunConfig(retriever=retriever, progress=False, **kw), LOCOMO, out,
                      echo=lambda m: None, gold_overlay=AUDIT)


@pytest.fixture(scope="module")
def overlay_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("overlay") / "run.jsonl"
    _run(out)
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_recorded_and_summarised(overlay_run: Path) -> None:
    meta = json.loads(sidecar_path(overlay_run).read_text())
    assert meta["selection"]["gold_overlay"] == {
        "name": AUDIT.name, "sha256": sha256_file(AUDIT), "format": "locomo-audit",
        "n_entries": 7}
    summary = json.loads(summary_path(overlay_run).read_text())
    # the same numbers `score` gives on the run's rankings: one scorer
    ranks = {r["question_id"]: r["ranked_session_ids"] for r in _rows(overlay_run)}
    scored = score(ranks, LOCOMO, gold_overlay=AUDIT)
    assert summary["protocols"] == scored["protocols"]
    assert summary["protocols_audited"] == scored["protocols_audited"]
    assert summary["gold_overlay"] == scored["gold_overlay"]
    assert summary["protocols"] != summary["protocols_audited"]


def test_fingerprint_only_changes_with_an_overlay(tmp_path: Path, overlay_run: Path) -> None:
    plain = runner.run(RunConfig(retriever="flat-bm25", progress=False), LOCOMO,
                       tmp_path / "plain.jsonl", echo=lambda m: None)
    meta = json.loads(sidecar_path(overlay_run).read_text())
    assert plain.fingerprint != meta["fingerprint"]
    assert "gold_overlay" not in plain.summary and "protocols_audited" not in plain.summary
    assert _rows(tmp_path / "plain.jsonl")[0]["metrics"] == _rows(overlay_run)[0]["metrics"]


def test_verify_rederives(overlay_run: Path, tmp_path: Path) -> None:
    rep = verify(overlay_run, LOCOMO, gold_overlay=AUDIT)
    assert rep.verified, rep.format()
    rep = verify(overlay_run, LOCOMO)  # without the file: not verified, and says why
    assert rep.ok and not rep.verified
    assert any(name == AUDITED and status == "not checked" and "--gold-overlay" in detail
               for name, status, detail in rep.checks)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"tiny-1:q0": ["D2:1"]}))
    rep = verify(overlay_run, LOCOMO, gold_overlay=other)
    assert any(name == AUDITED and status == "FAIL" and "sha256" in detail
               for name, status, detail in rep.checks)


def _copy(src: Path, dst: Path) -> Path:
    for a, b in ((src, dst), (sidecar_path(src), sidecar_path(dst)),
                 (summary_path(src), summary_path(dst))):
        shutil.copyfile(a, b)
    return dst


def _failed(rep) -> list[str]:
    return [name for name, status, _ in rep.checks if status == "FAIL"]


def test_verify_catches_edited_audited_numbers(overlay_run: Path, tmp_path: Path) -> None:
    out = _copy(overlay_run, tmp_path / "run.jsonl")
    summary = json.loads(summary_path(out).read_text())
    summary["protocols_audited"]["locomo"]["metrics"]["recall_any@1"] += 0.1
    summary_path(out).write_text(json.dumps(summary))
    rep = verify(out, LOCOMO, gold_overlay=AUDIT)
    assert "summary recomputed from rows" in _failed(rep)
    # an item's corrected gold edited consistently with its metrics: the re-derivation
    # from the overlay file and the dataset catches it
    summary = json.loads(summary_path(overlay_run).read_text())
    summary["gold_overlay"]["items"]["tiny-1:q0"]["gold_audited"]["locomo"] = [
        "tiny-1:session_1"]
    from engram_eval.scoring.audited import audited_protocols

    summary["protocols_audited"] = audited_protocols(
        _rows(out), summary["gold_overlay"], ["locomo", "locomo_no_adversarial"])
    summary_path(out).write_text(json.dumps(summary))
    rep = verify(out, LOCOMO, gold_overlay=AUDIT)
    assert _failed(rep) == [AUDITED]
    summary.pop("protocols_audited")
    summary_path(out).write_text(json.dumps(summary))
    assert "summary recomputed from rows" in _failed(verify(out, LOCOMO, gold_overlay=AUDIT))


def test_overlay_given_to_a_run_without_one(tmp_path: Path) -> None:
    out = tmp_path / "plain.jsonl"
    runner.run(RunConfig(retriever="flat-bm25", progress=False), LOCOMO, out,
               echo=lambda m: None)
    assert AUDITED in _failed(verify(out, LOCOMO, gold_overlay=AUDIT))
    assert verify(out, LOCOMO).verified


def test_resume_needs_the_same_overlay(overlay_run: Path, tmp_path: Path) -> None:
    out = _copy(overlay_run, tmp_path / "run.jsonl")
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:5]))
    summary_path(out).unlink()
    with pytest.raises(ProvenanceError, match="gold_overlay"):
        runner.run(RunConfig(retriever="flat-bm25", progress=False), LOCOMO, out,
                   echo=lambda m: None, resume=True)
    runner.run(RunConfig(retriever="flat-bm25", progress=False), LOCOMO, out,
               echo=lambda m: None, resume=True, gold_overlay=AUDIT)
    got, want = (json.loads(summary_path(p).read_text()) for p in (out, overlay_run))
    for key in ("protocols", "protocols_audited", "gold_overlay", "fingerprint"):
        assert got[key] == want[key]


def test_shards_merge_with_the_overlay(overlay_run: Path, tmp_path: Path) -> None:
    from engram_eval.runs.merge import merge

    shards = []
    for i in range(2):
        shards.append(tmp_path / f"s{i}.jsonl")
        _run(shards[-1], shard=f"{i}/2")
    with pytest.raises(ProvenanceError, match="--gold-overlay"):
        merge(shards, tmp_path / "m0.jsonl", dataset=LOCOMO)
    summary = merge(shards, tmp_path / "m.jsonl", dataset=LOCOMO, gold_overlay=AUDIT)
    whole = json.loads(summary_path(overlay_run).read_text())
    for key in ("protocols", "protocols_audited", "gold_overlay", "fingerprint"):
        assert summary[key] == whole[key]
    assert verify(tmp_path / "m.jsonl", LOCOMO, gold_overlay=AUDIT).verified


def test_cli_run_score_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.jsonl"
    assert cli.main(["run", str(LOCOMO), "--retriever", "flat-bm25", "--no-progress",
                     "--output", str(out), "--gold-overlay", str(AUDIT)]) == 0
    text = capsys.readouterr().out
    assert "audited gold (locomo_tiny_audit.json" in text and "audited protocol=locomo" in text
    assert cli.main(["verify", str(out), "--dataset", str(LOCOMO), "--gold-overlay",
                     str(AUDIT)]) == 0
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--dataset", str(LOCOMO)]) == 3
    public = tmp_path / "rankings.jsonl"
    public.write_text("".join(json.dumps({"question_id": r["question_id"],
                                          "ranked_session_ids": r["ranked_session_ids"]}) + "\n"
                              for r in _rows(out)))
    scored = tmp_path / "scored.json"
    assert cli.main(["score", str(public), "--dataset", str(LOCOMO), "--gold-overlay",
                     str(AUDIT), "--output", str(scored)]) == 0
    got = json.loads(scored.read_text())
    summary = json.loads(summary_path(out).read_text())
    assert got["protocols_audited"] == summary["protocols_audited"]
