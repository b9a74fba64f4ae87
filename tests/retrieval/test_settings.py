"""RetrievalSettings (engram_eval.retrieval.settings), RunConfig's retrieval part, CLI help."""

from __future__ import annotations

import dataclasses

import pytest

from engram_eval.errors import ConfigError
from engram_eval.retrieval.settings import GROUPS, RetrievalSettings
from engram_eval.runs.config import RunConfig

# Field names (= YAML keys, = CLI flags with dashes) the landed RunConfig had; relied on.
LANDED_FIELDS = """retriever dataset_format protocols limit question_ids use_dense embedding_backend
embedding_model embedding_precision dense_piece_words dense_piece_overlap dense_aggregate
use_bm25_user use_bm25_assistant bm25_k1 bm25_b rrf_k weight_dense weight_bm25_user
weight_bm25_assistant temporal temporal_boost rerank reranker_backend reranker_model
rerank_candidates rerank_max_length fusion_alpha passage_fallback passage_floor
passage_max_words preserve_prior result_k confidence_filter batch_size use_cache cache_dir
threads progress dummy_salt""".split()


@pytest.mark.parametrize(("changes", "field"), [
    ({"dense_piece_words": 16, "dense_piece_overlap": 16}, "dense_piece_overlap"),
    ({"rrf_k": -1.0}, "rrf_k"),
    ({"fusion": "borda"}, "fusion"),
    ({"normalisation": "rank"}, "normalisation"),
    ({"weight_bm25_turn": 11.0}, "weight_bm25_turn"),
    ({"bm25_b": "high"}, "bm25_b"),
    ({"use_dense": "yes"}, "use_dense"),
    ({"use_dense": False, "use_dense_rocchio": True}, "use_dense_rocchio"),
])
def test_settings_validate_on_construction(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        RetrievalSettings(**changes)
    with pytest.raises(ConfigError, match=field):
        dataclasses.replace(RetrievalSettings(), **changes)
    with pytest.raises(ConfigError, match=field):
        RunConfig(**changes)


def test_run_config_is_its_retrieval_settings_plus_run_fields() -> None:
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(LANDED_FIELDS) <= names
    assert {f.name for f in dataclasses.fields(RetrievalSettings)} <= names
    cfg = RunConfig(bm25_k1=1.2, fusion="convex", weight_dense=0.7)
    s = cfg.retrieval_settings()
    assert type(s) is RetrievalSettings
    assert (s.bm25_k1, s.fusion, s.weight_dense) == (1.2, "convex", 0.7)
    # the other fields keep their defaults (PROVENANCE.md section 18); weights of signals
    # that are off (Rocchio) are left out
    assert s.fusion_spec() == {"method": "convex", "normalisation": "minmax", "k": 60.0,
                               "weights": {"dense": 0.7, "bm25_user": 0.5,
                                           "bm25_assistant": 0.1, "bm25_turn": 0.3,
                                           "bm25_prf": 0.3}}
    off = RunConfig(use_bm25_prf=False, use_dense_rocchio=False).retrieval_settings()
    assert set(off.fusion_spec()["weights"]) == {"dense", "bm25_user", "bm25_assistant",
                                                 "bm25_turn"}
    assert RetrievalSettings.of({"rrf_k": 3.0}).rrf_k == 3.0


def test_yaml_loads_new_fusion_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "c.yaml"
    p.write_text("fusion: convex\nnormalisation: zscore\nweight_bm25_turn: 0.3\n"
                 "use_bm25_turn: true\n")
    cfg = RunConfig.from_yaml(p)
    assert (cfg.fusion, cfg.normalisation, cfg.weight_bm25_turn) == ("convex", "zscore", 0.3)
    p.write_text("fusion: borda\n")
    with pytest.raises(ConfigError, match="fusion"):
        RunConfig.from_yaml(p)


def test_run_help_is_grouped_by_stage_and_hides_dummy_salt(
        capsys: pytest.CaptureFixture[str]) -> None:
    from engram_eval.cli.main import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--help"])
    out = capsys.readouterr().out
    assert "--dummy-salt" not in out
    positions = [out.index(f"\n{g}:\n") for g in GROUPS]
    assert positions == sorted(positions)
    dense = out[out.index("\ndense:\n"):out.index("\nlexical:\n")]
    assert "--dense-piece-words" in dense and "--bm25-k1" not in dense
    fusion = out[out.index("\nfusion:\n"):out.index("\ntemporal:\n")]
    assert "--rrf-k" in fusion and "--normalisation" in fusion
    # hidden, but still accepted
    args = parser.parse_args(["run", "d.json", "--output", "o.jsonl", "--dummy-salt", "x",
                              "--rrf-k", "0", "--no-use-dense"])
    assert (args.dummy_salt, args.rrf_k, args.use_dense) == ("x", 0.0, False)
