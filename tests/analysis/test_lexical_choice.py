"""``engram_eval.analysis.lexical_choice`` and ``engram_eval.analysis.first_stage``: the two
files of ``results/lexical`` made by a module rather than a command (the variant chosen per chat structure, and
the frozen first stage without its rerank fields)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engram_eval.analysis import first_stage as FS
from engram_eval.analysis import lexical_choice as LC
from engram_eval.retrieval.settings import CARD_FIELDS
from engram_eval.runs.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def _reports(d: Path, estimates: dict[str, float]) -> None:
    """Reports of tune of one run: LoCoMo ones (``loc_``) with their fold unit, the others
    without one, as written before tune recorded it."""
    for name, cv in estimates.items():
        fold = {"estimate": cv, **({"unit": "id-prefix"} if name.startswith("loc_") else {})}
        (d / f"tune_{name}.yaml.tuning.json").write_text(json.dumps(
            {"cross_validation": fold, "in_sample_score": cv + 0.01}))


def test_the_best_estimate_per_structure_ties_to_the_first_listed(tmp_path: Path,
                                                                  capsys) -> None:
    _reports(tmp_path, {"lme_plain": 0.5, "lme_stem": 0.6,
                        "loc_a": 0.7, "loc_b": 0.7, "loc_c": 0.2})
    report = LC.lexical_choice(tmp_path, [["plain", "stem"], ["c", "b", "a"]])
    assert report["rule"] == LC.RULE
    chat, people = report["structures"]["chat"], report["structures"]["people"]
    assert chat["chosen"] == "stem" and people["chosen"] == "b"  # b listed before a
    assert list(people["variants"]) == ["c", "b", "a"]
    assert chat["variants"]["plain"] == {"cv_estimate": 0.5, "cv_unit": "question",
                                         "in_sample": 0.51,
                                         "report": "tune_lme_plain.yaml.tuning.json"}
    assert people["variants"]["a"]["cv_unit"] == "id-prefix"
    assert LC.main([str(tmp_path), "plain stem", "c b a"]) == 0
    assert json.loads(capsys.readouterr().out) == {"chat": "stem", "people": "b"}
    written = (tmp_path / LC.OUTPUT).read_text()
    assert written == json.dumps(report, indent=1) + "\n"
    with pytest.raises(FileExistsError):  # never overwritten
        LC.main([str(tmp_path), "plain stem", "c b a"])
    assert LC.main([str(tmp_path), "plain stem"]) == 2
    with pytest.raises(FileNotFoundError):
        LC.lexical_choice(tmp_path, [["plain"], ["missing"]])


def test_first_stage_drops_the_rerank_fields_in_order(tmp_path: Path) -> None:
    src = tmp_path / "tuned.yaml"
    cfg = {"retriever": "hybrid", "rerank": True, "reranker_model": "m", "weight_dense": 1.0,
           **{f: 1 for f in CARD_FIELDS}, "people_overrides": {"rerank": False},
           "temporal": True}
    src.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = tmp_path / "heldout_config.yaml"
    done = subprocess.run([sys.executable, "-m", "engram_eval.analysis.first_stage", str(src),
                           str(out)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    head = text.splitlines()[:2]
    assert head[0] == (f"# {src} without its rerank fields "
                       f"({', '.join(sorted({*CARD_FIELDS, 'rerank', 'reranker_model'}))}): "
                       "they come from")
    assert head[1] == "# the command line or the reranker's card. Load with engram-eval run " \
                      "--config"
    kept = yaml.safe_load(text)
    assert list(kept) == ["retriever", "weight_dense", "people_overrides", "temporal"]
    assert kept["people_overrides"] == {"rerank": False}  # nested overrides are kept
    assert RunConfig.from_yaml(out).weight_dense == 1.0  # loads as a run configuration
    with pytest.raises(FileExistsError):  # never overwritten
        FS.main([str(src), str(out)])
    assert FS.main([str(src)]) == 2
