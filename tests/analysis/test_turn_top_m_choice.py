"""``engram_eval.analysis.turn_top_m``: the turn top-m variant chosen per chat structure from
the multi-run tuning reports, compared fold by fold with the baseline, with the nested
estimate (the variant chosen inside each fold)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.analysis import turn_top_m as TM
from engram_eval.errors import ConfigError


def _part(folds: list[tuple[int, float, float]]) -> dict:
    """A report part: per fold (n, train_score, held_out_score)."""
    n_all = sum(n for n, _, _ in folds)
    return {"path": "run.jsonl.gz", "protocol": "p", "n_questions": n_all,
            "cv_estimate": sum(n * h for n, _, h in folds) / n_all, "in_sample_score": 0.9,
            "cv_per_fold": [{"fold": f, "n": n, "train_score": t, "held_out_score": h}
                            for f, (n, t, h) in enumerate(folds)]}


def _write(d: Path, variant: str, dense_m: int, people_m: int | None,
           chat: list | None, people: list | None, prefix: str = TM.PREFIX) -> None:
    structures = {}
    if chat is not None:
        structures["chat"] = {"parts": [_part(chat)]}
    if people is not None:
        structures["people"] = {"parts": [_part(people)]}
    over = {} if people_m is None else {"dense_turn_top_m": people_m}
    config = {"dense_turn_top_m": dense_m, "people_overrides": over}
    (d / TM.report_name(variant, prefix)).write_text(json.dumps(
        {"structures": structures, "config": config}))


def test_choice_folds_and_nested_estimate(tmp_path: Path) -> None:
    # chat: d3 better on both folds; people: d3 better on fold 0 only, worse overall
    _write(tmp_path, "d1", 1, None, chat=[(3, 0.80, 0.70), (1, 0.75, 0.60)],
           people=[(2, 0.60, 0.50), (2, 0.70, 0.90)])
    _write(tmp_path, "d3", 3, 2, chat=[(3, 0.85, 0.80), (1, 0.70, 0.90)],
           people=[(2, 0.65, 0.55), (2, 0.60, 0.40)])
    r = TM.turn_top_m(tmp_path, ["d1", "d3"])
    assert r["baseline"] == "d1" and r["rule"] == TM.RULE
    chat, people = r["structures"]["chat"], r["structures"]["people"]
    assert chat["chosen"] == "d3" and people["chosen"] == "d1"
    assert chat["variants"]["d3"]["cv_estimate"] == pytest.approx((3 * 0.80 + 0.90) / 4)
    assert chat["variants"]["d3"]["folds_vs_baseline"] == {"better": 2, "worse": 0,
                                                           "equal": 0}
    assert people["variants"]["d3"]["folds_vs_baseline"] == {"better": 1, "worse": 1,
                                                             "equal": 0}
    assert chat["variants"]["d1"]["folds_vs_baseline"]["equal"] == 2
    assert chat["variants"]["d3"]["turn_fields"]["dense_turn_top_m"] == 3
    assert people["variants"]["d3"]["turn_fields"]["dense_turn_top_m"] == 2  # the override
    assert people["variants"]["d1"]["turn_fields"] == {"bm25_turn_top_m": 1,
                                                       "dense_turn_top_m": 1}
    # nested, chat: fold 0 picks d3 (train .85 > .80), fold 1 picks d1 (.75 > .70)
    assert [p["variant"] for p in chat["nested"]["per_fold"]] == ["d3", "d1"]
    assert chat["nested"]["estimate"] == pytest.approx((3 * 0.80 + 1 * 0.60) / 4)
    # people: fold 0 d3 (.65 > .60), fold 1 d1 (.70 > .60)
    assert people["nested"]["estimate"] == pytest.approx((2 * 0.55 + 2 * 0.90) / 4)


def test_ties_go_to_the_first_listed(tmp_path: Path) -> None:
    same = [(2, 0.5, 0.5), (2, 0.5, 0.5)]
    _write(tmp_path, "b", 2, None, chat=same, people=same)
    _write(tmp_path, "a", 1, None, chat=same, people=same)
    r = TM.turn_top_m(tmp_path, ["b", "a"])
    for s in r["structures"].values():
        assert s["chosen"] == "b"
        assert {p["variant"] for p in s["nested"]["per_fold"]} == {"b"}


def test_people_only_reports_and_the_cli(tmp_path: Path, capsys) -> None:
    _write(tmp_path, "d1b1", 1, None, chat=None, people=[(1, 0.5, 0.5), (1, 0.5, 0.4)],
           prefix="topm_loc_")
    _write(tmp_path, "d2b1", 2, None, chat=None, people=[(1, 0.6, 0.6), (1, 0.6, 0.6)],
           prefix="topm_loc_")
    assert TM.main([str(tmp_path), "d1b1 d2b1", "topm_loc_", "people.json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"people": "d2b1"}
    r = json.loads((tmp_path / "people.json").read_text())
    assert list(r["structures"]) == ["people"]
    assert r["structures"]["people"]["variants"]["d2b1"]["turn_fields"]["dense_turn_top_m"] == 2
    with pytest.raises(FileExistsError):  # never overwritten
        TM.main([str(tmp_path), "d1b1 d2b1", "topm_loc_", "people.json"])


def test_different_folds_or_missing_fold_scores_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "a", 1, None, chat=[(2, 0.5, 0.5), (2, 0.5, 0.5)], people=None)
    _write(tmp_path, "b", 2, None, chat=[(3, 0.5, 0.5), (1, 0.5, 0.5)], people=None)
    with pytest.raises(ConfigError, match="different folds"):
        TM.turn_top_m(tmp_path, ["a", "b"])
    rep = json.loads((tmp_path / TM.report_name("b")).read_text())
    del rep["structures"]["chat"]["parts"][0]["cv_per_fold"]
    (tmp_path / TM.report_name("b")).write_text(json.dumps(rep))
    with pytest.raises(ConfigError, match="no cv_per_fold"):
        TM.turn_top_m(tmp_path, ["a", "b"])
