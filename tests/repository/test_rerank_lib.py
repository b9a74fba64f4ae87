"""``scripts/_rerank_lib.sh``'s ``rerank_folds``, the one out-of-fold rerank check that
``publish_lexical.sh rerank`` and ``publish_topm.sh rerank`` both call: the runs it makes, in
order, and the candidates it hands to ``choose_rerank.py``, with a fake ``engram-eval`` and a
fake python that log their arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from shell_fakes import logged_calls

ROOT = Path(__file__).resolve().parents[2]


def _rerank_folds(tmp_path: Path, depths: str, alphas: str, prefix: str = "",
                  choice: str = "o/choice.json") -> list[str]:
    script = (f'set -euo pipefail\nE="{tmp_path}/engram-eval" PY="{tmp_path}/python" '
              f'SCRATCH=S COMMON=(--cache-dir c)\nsource "{ROOT}/scripts/_rerank_lib.sh"\n'
              f'{prefix}rerank_folds tune.json cfg.yaml o "{choice}" "{depths}" "{alphas}"\n')
    return logged_calls(tmp_path, script)


def test_first_stage_halves_then_every_depth_and_blend_then_the_choice(tmp_path: Path) -> None:
    calls = _rerank_folds(tmp_path, "15 20", "0.8 0.7")
    runs = [c.split(" --output ", 1)[1] for c in calls if c.startswith("engram-eval run ")]
    rerank = ("--trace-sessions 5 --rerank --reranker-model S/ce_fold{i} --reranker-backend onnx "
              "--reranker-precision int8 --rerank-unit turn --rerank-max-length 128 "
              "--rerank-candidates {d} --fusion-alpha {a}")
    assert runs == (
        [f"o/fold{i}_none.jsonl --cache-dir c --config cfg.yaml --shard {i}/2 "
         "--trace-sessions 5 --no-rerank" for i in (0, 1)]
        + [f"o/fold{i}_d{d}_a{a}.jsonl --cache-dir c --config cfg.yaml --shard {i}/2 "
           + rerank.format(i=i, d=d, a=a)
           for d in (15, 20) for a in ("0.8", "0.7") for i in (0, 1)])
    # every run verified with --rerun 3, then compressed
    assert sum(c.startswith("engram-eval verify ") and "--rerun 3" in c for c in calls) == 10
    assert sum(c.startswith("engram-eval compress ") for c in calls) == 10
    choose = [c for c in calls if c.startswith("python ")]
    assert choose == [
        "python benchmarks/longmemeval/choose_rerank.py --candidate none o/fold0_none.jsonl.gz "
        "o/fold1_none.jsonl.gz "
        + " ".join(f"--candidate d{d}_a{a} o/fold0_d{d}_a{a}.jsonl.gz o/fold1_d{d}_a{a}.jsonl.gz"
                   for d in (15, 20) for a in ("0.8", "0.7"))
        + " --output o/choice.json"]


def test_an_existing_choice_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "choice.json").write_text("{}")
    calls = _rerank_folds(tmp_path, "20", "0.8")
    assert not [c for c in calls if c.startswith("python ")]


def test_other_fold_cross_encoders_and_run_names(tmp_path: Path) -> None:
    """CE_NAME picks $SCRATCH/CE_NAME{0,1}; RUN_TAG prefixes the reranked runs and their
    candidates; the first-stage halves keep their names (shared with the default family)."""
    calls = _rerank_folds(tmp_path, "20", "0.9", prefix="CE_NAME=ce_x RUN_TAG=new_ ")
    runs = [c.split(" --output ", 1)[1] for c in calls if c.startswith("engram-eval run ")]
    assert [r.split()[0] for r in runs] == ["o/fold0_none.jsonl", "o/fold1_none.jsonl",
                                           "o/fold0_new_d20_a0.9.jsonl",
                                           "o/fold1_new_d20_a0.9.jsonl"]
    assert "--reranker-model S/ce_x0 " in runs[2] and "--reranker-model S/ce_x1 " in runs[3]
    choose = next(c for c in calls if c.startswith("python "))
    assert ("--candidate new_d20_a0.9 o/fold0_new_d20_a0.9.jsonl.gz "
            "o/fold1_new_d20_a0.9.jsonl.gz") in choose


def test_extra_rerank_options_and_first_stage_runs_elsewhere(tmp_path: Path) -> None:
    """RERANK_ARGS is added to every reranked run (not to the first stage); FIRST_DIR holds
    the first-stage halves (run there when absent, handed to the choice from there)."""
    calls = _rerank_folds(tmp_path, "20", "0.5",
                          prefix='RERANK_ARGS="--rerank-prior score" FIRST_DIR=f ')
    runs = [c.split(" --output ", 1)[1] for c in calls if c.startswith("engram-eval run ")]
    assert [r.split()[0] for r in runs] == ["f/fold0_none.jsonl", "f/fold1_none.jsonl",
                                           "o/fold0_d20_a0.5.jsonl", "o/fold1_d20_a0.5.jsonl"]
    assert ["--rerank-prior" in r for r in runs] == [False, False, True, True]
    assert all(r.endswith("--fusion-alpha 0.5 --rerank-prior score") for r in runs[2:])
    choose = next(c for c in calls if c.startswith("python "))
    assert "--candidate none f/fold0_none.jsonl.gz f/fold1_none.jsonl.gz " in choose


def test_an_empty_choice_runs_every_fold_and_chooses_nothing(tmp_path: Path) -> None:
    calls = _rerank_folds(tmp_path, "20", "0.8", choice="")
    assert sum(c.startswith("engram-eval run ") for c in calls) == 4
    assert not [c for c in calls if c.startswith("python ")]


def test_add_candidate_appends_both_halves_of_one_run() -> None:
    """add_candidate NAME DIR RUN: the choose_rerank.py arguments of one candidate, appended
    to CANDS (publish_prior.sh choose, publish_topm.sh retrain and absent)."""
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    script = (f'set -euo pipefail\nsource "{ROOT}/scripts/_rerank_lib.sh"\nCANDS=()\n'
              'add_candidate none t none\nadd_candidate "s a" o score_d20_a0.6\n'
              'printf "%s\\n" "${CANDS[@]}"\n')
    p = subprocess.run(["bash", "-c", script], text=True, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "--candidate", "none", "t/fold0_none.jsonl.gz", "t/fold1_none.jsonl.gz",
        "--candidate", "s a", "o/fold0_score_d20_a0.6.jsonl.gz", "o/fold1_score_d20_a0.6.jsonl.gz"]


def test_train_folds_leaves_each_half_out_and_copies_each_card(tmp_path: Path) -> None:
    """train_folds: $SCRATCH/NAME{0,1}, each trained with TRAIN and the extra options without
    the half `run --shard I/2` selects, each card copied to $OUT; a model or card already
    there is left alone."""
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    fake = ('#!/bin/sh\necho "$(basename "$0") $*" >> "$CALLS"\n'
            'while [ "$#" -gt 0 ]; do [ "$1" = --output ] && { mkdir -p "$2"; '
            'echo "{}" > "$2.card.json"; }; shift; done\n')
    (tmp_path / "engram-eval").write_text(fake)
    (tmp_path / "engram-eval").chmod(0o755)
    (tmp_path / "S" / "ce_x1").mkdir(parents=True)  # fold 1 trained before
    (tmp_path / "S" / "ce_x1.card.json").write_text('{"old": 1}')
    (tmp_path / "o").mkdir()
    script = (f'set -euo pipefail\nE="{tmp_path}/engram-eval" SCRATCH=S OUT=o\n'
              f'source "{ROOT}/scripts/_rerank_lib.sh"\n'
              'train_folds tune.json cand.jsonl ce_x --unanswerable-negatives 5\n')
    p = subprocess.run(["bash", "-c", script], cwd=tmp_path, text=True, capture_output=True,
                       env={**os.environ, "CALLS": str(tmp_path / "calls")}, timeout=60)
    assert p.returncode == 0, p.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    train = ("engram-eval train-reranker tune.json --run cand.jsonl --output S/ce_x0 "
             "--exclude-shard 0/2 --max-length 128 --epochs 3 --batch-size 16 "
             "--learning-rate 4e-5 --hard-negatives 5 --random-negatives 3 --seed 0 "
             "--unanswerable-negatives 5")
    assert calls == [train]
    assert (tmp_path / "o" / "ce_x0.card.json").read_text() == "{}\n"
    assert (tmp_path / "o" / "ce_x1.card.json").read_text() == '{"old": 1}'
