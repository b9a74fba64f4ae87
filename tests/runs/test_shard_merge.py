"""--shard I/N and `engram-eval merge` (dummy retriever, tiny fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import merge
from engram_eval.runs.runner import run
from engram_eval.runs.shard import parse_shard, shard_of
from engram_eval.runs.verify import verify

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
N = 3


def _cfg(**kw: object) -> RunConfig:
    return RunConfig(retriever="dummy", progress=False, **kw)  # type: ignore[arg-type]


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


def _strip(row: dict) -> dict:  # type: ignore[type-arg]
    return {k: v for k, v in row.items() if k != "timing"}


@pytest.fixture()
def shards(tmp_path: Path) -> tuple[list[Path], Path]:
    outs = []
    for i in range(N):
        out = tmp_path / f"shard{i}.jsonl"
        run(_cfg(shard=f"{i}/{N}"), FIXTURE, out, echo=lambda m: None)
        outs.append(out)
    full = tmp_path / "full.jsonl"
    run(_cfg(), FIXTURE, full, echo=lambda m: None)
    return outs, full


def test_shard_assignment_is_stable() -> None:
    assert parse_shard("") is None and parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ConfigError, match="shard"):
            parse_shard(bad)
    assert shard_of("lme_t01", 7) == int.from_bytes(
        __import__("hashlib").sha256(b"lme_t01").digest(), "big") % 7


def test_shards_merge_to_the_unsharded_run(shards, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outs, full = shards
    ids = [json.loads(full.read_text().splitlines()[i])["question_id"] for i in range(12)]
    for i, out in enumerate(outs):
        meta = json.loads(sidecar_path(out).read_text())
        assert meta["selection"]["shard"]["index"] == i
        assert meta["selection"]["shard"]["all_ids"] == ids
        assert [r["question_id"] for r in _rows(out)] == [q for q in ids if shard_of(q, N) == i]
    merged = tmp_path / "merged.jsonl"
    summary = merge(list(reversed(outs)), merged, dataset=FIXTURE)
    assert [_strip(r) for r in _rows(merged)] == [_strip(r) for r in _rows(full)]
    full_meta = json.loads(sidecar_path(full).read_text())
    meta = json.loads(sidecar_path(merged).read_text())
    assert meta["fingerprint"] == full_meta["fingerprint"] == summary["fingerprint"]
    assert meta["selection"] == full_meta["selection"]
    assert [s["shard"] for s in meta["runs"][-1]["shards"]] == list(range(N))
    full_summary = json.loads(summary_path(full).read_text())
    assert summary["protocols"] == full_summary["protocols"]
    rep = verify(merged, FIXTURE)
    assert rep.ok and rep.verified, rep.format()


def test_merge_refuses_mismatched_fingerprints(shards, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outs, _ = shards
    other = tmp_path / "other1.jsonl"
    run(_cfg(shard=f"1/{N}", dummy_salt="x"), FIXTURE, other, echo=lambda m: None)
    target = tmp_path / "m.jsonl"
    with pytest.raises(ProvenanceError, match="not a shard of the same run") as e:
        merge([outs[0], other, outs[2]], target, dataset=FIXTURE)
    assert "dummy_salt" in str(e.value) or "salt" in str(e.value)
    assert not target.exists() and not sidecar_path(target).exists()


def test_merge_refuses_missing_and_duplicate_shards(shards, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outs, full = shards
    target = tmp_path / "m.jsonl"
    with pytest.raises(ProvenanceError, match=f"shard\\(s\\) 1/{N} missing"):
        merge([outs[0], outs[2]], target, dataset=FIXTURE)
    with pytest.raises(ProvenanceError, match="given twice"):
        merge([outs[0], outs[1], outs[1], outs[2]], target, dataset=FIXTURE)
    with pytest.raises(ProvenanceError, match="not a sharded result"):
        merge([outs[0], full], target, dataset=FIXTURE)
    assert not target.exists()


def test_merge_refuses_missing_and_duplicate_questions(shards, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outs, _ = shards
    target = tmp_path / "m.jsonl"
    lines = outs[2].read_text().splitlines(keepends=True)
    outs[2].write_text("".join(lines[:-1]))  # an unfinished shard
    with pytest.raises(ProvenanceError, match="incomplete"):
        merge(outs, target, dataset=FIXTURE)
    outs[2].write_text("".join(lines + lines[-1:]))  # a question twice
    with pytest.raises(ProvenanceError, match="duplicate question_id"):
        merge(outs, target, dataset=FIXTURE)
    foreign = _rows(outs[0])[0]
    outs[2].write_text("".join(lines) + json.dumps(foreign) + "\n")  # another shard's question
    with pytest.raises(ProvenanceError, match="not in the run's selection"):
        merge(outs, target, dataset=FIXTURE)
    assert not target.exists()


def test_merge_cli_refuses_existing_output(shards, tmp_path: Path,  # type: ignore[no-untyped-def]
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(k, "1" if k != "TOKENIZERS_PARALLELISM" else "false")
    outs, _ = shards
    target = tmp_path / "m.jsonl"
    argv = ["merge", *map(str, outs), "--output", str(target), "--dataset", str(FIXTURE)]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 2


def test_trace_sessions_keeps_ranking_and_is_recorded(tmp_path: Path) -> None:
    full, cut = tmp_path / "full.jsonl", tmp_path / "cut.jsonl"
    run(_cfg(), FIXTURE, full, echo=lambda m: None)
    run(_cfg(trace_sessions=2), FIXTURE, cut, echo=lambda m: None)
    for a, b in zip(_rows(full), _rows(cut), strict=True):
        assert b["ranked_session_ids"] == a["ranked_session_ids"] and b["scores"] == a["scores"]
        assert b["trace"]["sessions"] == a["trace"]["sessions"][:2]
    ma = json.loads(sidecar_path(full).read_text())
    mb = json.loads(sidecar_path(cut).read_text())
    assert ma["config"]["trace_sessions"] == 0 and mb["config"]["trace_sessions"] == 2
    assert ma["fingerprint"] != mb["fingerprint"]
