"""train-encoder (issue 42): triplets by hand, the card, the held-out refusal, folds by
conversation, determinism under a seed, and the safety of its output directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram_eval.analysis.train_encoder import (
    EncoderTrainSettings,
    build_triplets,
    fold_unit,
    in_fold,
    train_encoder,
    triplets_sha256,
)
from engram_eval.cli import main as cli
from engram_eval.data.records import Question, Session, Turn
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import sha256_file

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"


def u(text: str, i: int, has_answer: bool = False) -> Turn:
    return Turn("user", text, i, has_answer)


def a(text: str, i: int, has_answer: bool = False) -> Turn:
    return Turn("assistant", text, i, has_answer)


def chat_question(qid: str = "q1", marked: bool = True) -> Question:
    sessions = (
        Session("g", "2023/05/01", (u("hello there", 0), a("hi", 1),
                                    u("my puppy is a border collie", 2, marked),
                                    u("what breed of puppy barks", 3))),
        Session("n1", "2023/05/02", (u("the weather today", 0), a("sunny", 1),
                                     u("what breed is a good puppy for flats", 2))),
        Session("n2", "2023/05/03", (u("cooking pasta", 0),)),
        Session("n3", "2023/05/04", (u("a puppy", 0), u("breed puppy", 1))),
        Session("n4", "2023/05/05", (a("only the assistant speaks", 0),)),
    )
    return Question(qid, "single-session-user", "What breed is my puppy?", "border collie",
                    "2023/06/01", sessions, ("g",))


def test_triplets_follow_the_rules_and_repeat() -> None:
    q = chat_question()
    ranking = {"q1": ["n3", "g", "n1", "n4", "n2"]}
    s = EncoderTrainSettings(hard_negatives=2)
    got, counts = build_triplets([q], ranking, s)
    # one marked evidence turn; negatives: the most question-like user turn of the first two
    # non-gold ranked sessions (n3 turn 1 "breed puppy", n1 turn 2), in ranking order
    assert [(t.session_id, t.turn_index, t.kind) for t in got] == [("g", 2, "marked")]
    assert got[0].anchor == q.question and got[0].positive == "my puppy is a border collie"
    assert got[0].negatives == ("breed puppy", "what breed is a good puppy for flats")
    assert got[0].negative_kinds == ("hard", "hard")
    assert counts["triplets"] == 1 and counts["hard_negatives"] == 2
    again, _ = build_triplets([q], ranking, s)
    assert triplets_sha256(again) == triplets_sha256(got)


def test_unmarked_answer_sessions_give_their_most_question_like_user_turns() -> None:
    q = chat_question(marked=False)
    got, _ = build_triplets([q], {"q1": ["n2"]}, EncoderTrainSettings(unmarked_positives=2))
    # no marked turn: the gold session's user turns by terms shared with the question
    # (tokenize keeps every word): turn 2 (my, puppy, is) and turn 3 (what, breed, puppy)
    # tie at 3, the earlier first; turn 0 shares none; the ranking (n2 only, "cooking
    # pasta") gives the hard negative
    assert [(t.turn_index, t.kind) for t in got] == [(2, "unmarked"), (3, "unmarked")]
    assert all(t.negatives == ("cooking pasta",) for t in got)
    none, counts = build_triplets([q], {"q1": ["n2"]},
                                  EncoderTrainSettings(unmarked_positives=0))
    assert none == [] and counts["skipped_ids"]["no_evidence_turn"] == ["q1"]


def test_assistant_evidence_is_a_positive_and_random_turns_fill_missing_negatives() -> None:
    base = chat_question(marked=False)
    sessions = (Session("g", "2023/05/01", (u("tell me about dogs", 0),
                                            a("a border collie herds sheep", 1, True))),
                ) + base.sessions[1:]
    q = Question("q9", "single-session-assistant", "Which dog herds sheep?", "collie",
                 "2023/06/01", sessions, ("g",))
    s = EncoderTrainSettings(hard_negatives=2, seed=3)
    got, counts = build_triplets([q], {"q9": ["n2"]}, s)  # the run holds one non-gold session
    assert [(t.turn_index, t.positive) for t in got] == [(1, "a border collie herds sheep")]
    assert got[0].negative_kinds == ("hard", "random")
    assert got[0].negatives[0] == "cooking pasta"
    assert counts["random_negatives"] == 1
    again, _ = build_triplets([q], {"q9": ["n2"]}, s)
    assert again == got  # the random turn is seeded by (seed, question id)


def test_folds_keep_a_conversation_together() -> None:
    assert fold_unit("conv-26:q12") == "conv-26" and fold_unit("e47becba") == "e47becba"
    ids = [f"conv-{c}:q{i}" for c in range(6) for i in range(5)]
    for k in range(2):
        by_conv: dict[str, set[bool]] = {}
        for i in ids:
            by_conv.setdefault(fold_unit(i), set()).add(in_fold(i, (k, 2)))
        assert all(len(v) == 1 for v in by_conv.values())
    with pytest.raises(ConfigError, match="exclude_fold"):
        EncoderTrainSettings(exclude_fold="2/2")
    with pytest.raises(ConfigError, match="loss"):
        EncoderTrainSettings(loss="triplet")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("te-runs")
    out = {}
    for name, data in (("lme", TINY), ("loc", LOCOMO)):
        out[name] = d / f"{name}.jsonl"
        assert cli.main(["run", str(data), "--retriever", "bm25", "--no-progress",
                         "--output", str(out[name])]) == 0
    return out


def small(model: str, **kw: object) -> EncoderTrainSettings:
    fields: dict[str, object] = {"base_model": model, "max_steps": 2, "batch_size": 4,
                                 "max_seq_length": 32, **kw}
    return EncoderTrainSettings(**fields)  # type: ignore[arg-type]


def test_train_writes_the_model_and_its_card(runs: dict[str, Path], tiny_embedding_model: str,
                                             tmp_path: Path) -> None:
    out = tmp_path / "enc"
    card = train_encoder(TINY, runs["lme"], out, small(tiny_embedding_model),
                         also=[(LOCOMO, runs["loc"])])
    on_disk = json.loads(Path(str(out) + ".card.json").read_text())
    assert on_disk == json.loads(json.dumps(card, sort_keys=True))
    assert card["kind"] == "engram-eval/encoder-card"
    assert [p["sha256"] for p in card["parts"]] == [sha256_file(TINY), sha256_file(LOCOMO)]
    assert all(p["run"]["rows_sha256"] and p["trained_question_ids"] for p in card["parts"])
    assert card["base_model"]["path"] == tiny_embedding_model
    assert card["settings"]["max_steps"] == 2 and card["training"]["steps"] == 2
    assert len(card["training"]["loss_curve"]) == 2
    tc = card["triplets"]
    assert tc["triplets"] == tc["marked"] + tc["unmarked"] > 0
    assert tc["triplets"] == sum(p["triplets"]["triplets"] for p in card["parts"])
    for rel, sha in card["output_files"].items():
        assert sha256_file(out / rel) == sha
    assert "model.safetensors" in card["output_files"]
    with pytest.raises(ProvenanceError, match="never overwrites"):
        train_encoder(TINY, runs["lme"], out, small(tiny_embedding_model))
    from sentence_transformers import SentenceTransformer

    vec = SentenceTransformer(str(out), device="cpu").encode(["my puppy"])
    assert vec.shape[0] == 1  # a loadable sentence-transformers model


def test_the_same_seed_gives_the_same_files(runs: dict[str, Path], tiny_embedding_model: str,
                                            tmp_path: Path) -> None:
    one = train_encoder(TINY, runs["lme"], tmp_path / "a", small(tiny_embedding_model))
    two = train_encoder(TINY, runs["lme"], tmp_path / "b", small(tiny_embedding_model))
    other = train_encoder(TINY, runs["lme"], tmp_path / "c", small(tiny_embedding_model,
                                                                     seed=1))
    weights = "model.safetensors"
    assert one["output_files"][weights] == two["output_files"][weights]
    assert one["triplets_sha256"] == two["triplets_sha256"]
    assert [x["loss"] for x in one["training"]["loss_curve"]] == [
        x["loss"] for x in two["training"]["loss_curve"]]
    assert other["output_files"][weights] != one["output_files"][weights]


def test_a_heldout_part_and_a_run_on_other_data_are_refused(runs: dict[str, Path],
                                                             tiny_embedding_model: str,
                                                             tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    assert cli.main(["split", str(TINY), "--holdout", "0.3", "--salt", "t",
                     "--output-dir", str(parts)]) == 0
    held = next(parts.glob("*.heldout.json*"))
    tune = next(parts.glob("*.tune.json*"))
    with pytest.raises(ProvenanceError, match="held-out"):
        train_encoder(held, runs["lme"], tmp_path / "m1", small(tiny_embedding_model))
    with pytest.raises(ProvenanceError, match="held-out"):  # also as a second part
        train_encoder(LOCOMO, runs["loc"], tmp_path / "m3", small(tiny_embedding_model),
                      also=[(held, runs["lme"])])
    with pytest.raises(ProvenanceError, match="was made on data"):
        train_encoder(tune, runs["lme"], tmp_path / "m2", small(tiny_embedding_model))
    assert not any(tmp_path.glob("m*"))
    assert not any(p.name.startswith(".m") for p in tmp_path.iterdir())


def test_exclude_fold_leaves_out_whole_conversations(runs: dict[str, Path],
                                                     tiny_embedding_model: str,
                                                     tmp_path: Path) -> None:
    from engram_eval.data.datasets import load_questions

    _, questions = load_questions(LOCOMO)
    held = {q.question_id for q in questions if in_fold(q.question_id, (0, 2))}
    card = train_encoder(LOCOMO, runs["loc"], tmp_path / "f0",
                         small(tiny_embedding_model, exclude_fold="0/2", batch_size=2))
    trained = set(card["parts"][0]["trained_question_ids"])
    assert card["excluded_questions"]["count"] == len(held)
    assert not trained & held
    assert {fold_unit(i) for i in trained}.isdisjoint({fold_unit(i) for i in held})


KILL_SCRIPT = """
import sys, time
from engram_eval.analysis import train_encoder as T
real = T._fit
def slow(triplets, base, out, s, log):
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.safetensors").write_bytes(b"half")
    print("STAGED", flush=True)
    time.sleep(60)
T._fit = slow
T.train_encoder(sys.argv[1], sys.argv[2], sys.argv[3],
                T.EncoderTrainSettings(base_model=sys.argv[4], max_steps=1, batch_size=4))
"""


def test_a_killed_training_leaves_nothing_under_the_output_name_and_reruns(
        runs: dict[str, Path], tiny_embedding_model: str, tmp_path: Path) -> None:
    out = tmp_path / "enc"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(TINY), str(runs["lme"]),
                             str(out), tiny_embedding_model], stdout=subprocess.PIPE, env=env,
                            text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.stdout.readline().strip() == "STAGED":
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    staging = tmp_path / ".enc.partial"
    assert staging.is_dir() and not out.exists()
    assert not Path(str(out) + ".card.json").exists()
    card = train_encoder(TINY, runs["lme"], out, small(tiny_embedding_model))  # re-run: safe
    assert not staging.exists() and out.is_dir()
    assert sha256_file(out / "model.safetensors") == card["output_files"]["model.safetensors"]


def test_a_directory_without_its_card_is_named(runs: dict[str, Path],
                                               tiny_embedding_model: str,
                                               tmp_path: Path) -> None:
    out = tmp_path / "enc"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ProvenanceError, match="exists without its card"):
        train_encoder(TINY, runs["lme"], out, small(tiny_embedding_model))
    assert (out / "keep.txt").read_text() == "mine"


def test_the_cli_writes_the_card_and_reports_progress(runs: dict[str, Path],
                                                      tiny_embedding_model: str,
                                                      tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    out = tmp_path / "enc"
    assert cli.main(["train-encoder", str(TINY), "--run", str(runs["lme"]), "--output",
                     str(out), "--base-model", tiny_embedding_model, "--max-steps", "2",
                     "--batch-size", "4", "--max-seq-length", "32"]) == 0
    cap = capsys.readouterr()
    assert "triplets" in cap.out and f"wrote {out}" in cap.out
    assert "train-encoder: step" in cap.err  # progress lines, not a progress bar
    card = json.loads(Path(str(out) + ".card.json").read_text())
    assert card["settings"]["batch_size"] == 4
