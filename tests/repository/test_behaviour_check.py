"""scripts/behaviour_check.py: the options that pin a range with intended changes
(``produce --run-args``, ``compare --drop-key``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("behaviour_check",
                                                  ROOT / "scripts" / "behaviour_check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_run_args_reach_every_ranking_job_before_its_own_arguments(tmp_path: Path) -> None:
    bc = _script()
    jobs = bc.ranking_jobs(tmp_path, tmp_path / "fx", tmp_path / "dev.json", 40, None,
                           locomo_args=["--protocol", "locomo"],
                           run_args=["--config", "b.yaml"])
    assert {j["name"].split("__")[0] for j in jobs} == {"longmemeval_tiny", "locomo_tiny",
                                                         "dev40"}
    for job in jobs:
        assert job["args"][:2] == ["--config", "b.yaml"], job
    locomo = next(j for j in jobs if j["name"] == "locomo_tiny__bm25")
    assert locomo["args"] == ["--config", "b.yaml", "--protocol", "locomo", "--retriever", "bm25"]
    dev = next(j for j in jobs if j["name"] == "dev40__dense")
    assert dev["args"] == ["--config", "b.yaml", "--limit", "40", "--retriever", "dense"]


def _rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_drop_key_ignores_an_added_key_at_any_depth_and_nothing_else(tmp_path: Path) -> None:
    bc = _script()
    before = _rows(tmp_path / "a.jsonl", [
        {"question_id": "q", "ranking": ["s1", "s2"], "trace": {"sessions": [{"score": 1.0}]}}])
    after = _rows(tmp_path / "b.jsonl", [
        {"question_id": "q", "ranking": ["s1", "s2"],
         "trace": {"sessions": [{"score": 1.0, "gate_features": {"dense": 0.5}}]}}])
    ok, why = bc.compare_rows(before, after)
    assert not ok and "gate_features" in why
    ok, why = bc.compare_rows(before, after, frozenset({"gate_features"}))
    assert ok, why
    moved = _rows(tmp_path / "c.jsonl", [
        {"question_id": "q", "ranking": ["s2", "s1"],
         "trace": {"sessions": [{"score": 1.0, "gate_features": {"dense": 0.5}}]}}])
    ok, why = bc.compare_rows(before, moved, frozenset({"gate_features"}))
    assert not ok and "ranking" in why


def test_defaults_yaml_is_the_roots_defaults_and_never_overwrites(tmp_path: Path) -> None:
    import dataclasses

    import pytest
    import yaml

    from engram_eval.retrieval.settings import RetrievalSettings

    bc = _script()
    out = tmp_path / "before_defaults.yaml"
    argv = ["defaults", "--before-root", str(ROOT), "--after-root", str(ROOT), "--output",
            str(out)]
    assert bc.main(argv) == 0
    s = RetrievalSettings()
    assert yaml.safe_load(out.read_text()) == {
        f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.metadata["fingerprint"]}
    RetrievalSettings(**yaml.safe_load(out.read_text()))  # a valid configuration
    with pytest.raises(SystemExit, match="refusing to overwrite"):
        bc.main(argv)
