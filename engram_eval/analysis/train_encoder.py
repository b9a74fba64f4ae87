"""``engram-eval train-encoder``: contrastive fine-tuning of the dense encoder on tuning parts.

``train-encoder PART --run RUN [--also PART RUN ...] --output DIR`` builds (question, evidence
turn, hard negative) triplets from each tuning part and a finished run's rankings on it,
fine-tunes the bi-encoder (default: the bundled all-MiniLM-L6-v2) with sentence-transformers'
``SentenceTransformerTrainer`` and ``MultipleNegativesRankingLoss`` (in-batch negatives plus the
mined hard negatives; batches never hold the same text twice), and writes the
sentence-transformers model directory ``DIR`` plus its card ``DIR.card.json``. The result is
used like any embedding model (``run --embedding-model DIR``) and can be shipped
(``scripts/ship_encoder.py``).

Triplets (deterministic: the same parts, runs and settings give the same triplets, in order):

* **Anchor**: the question text.
* **Positives**: the question's evidence turns in its gold sessions, as the dense signal embeds
  them (the turn's text): LongMemEval's ``has_answer`` turns (assistant turns too: the
  single-session-assistant questions keep their evidence there), and where no turn of the
  answer sessions is marked, the answer sessions' ``unmarked_positives`` user turns most like
  the question; LoCoMo's resolved evidence ``dia_id`` turns. A question without any (an
  abstention) gives no triplet and is counted in the card.
* **Hard negatives** (``hard_negatives`` per triplet): for the first non-gold sessions of the
  run's ranking (within ``negative_depth``), each session's turn most like the question (the
  turn most likely to fool the model, as ``train-reranker`` mines them); when the ranking
  holds too few, seeded random non-gold turns fill the columns (kind ``random`` in the counts).

Folds (``exclude_fold`` ``I/N``): a question is left out when the sha256 of its *fold unit*
modulo N is I; the unit is the question id's part before ``:`` (LoCoMo: the conversation, so a
fold never trains on a conversation it is then scored on; LongMemEval: the question itself,
the rule ``run --shard I/N`` selects by).

The output directory is written under a staging name beside it (``.DIR.partial``) and renamed
into place when training has finished; the card is written last. A kill leaves at most the
staging directory, which the next call removes before it starts, so re-running the same
command is always safe; a finished output (directory or card) is never overwritten, and a
directory without its card (killed between the two renames) is named as such.

The card records every part (path, sha256, split-manifest hash and part name from its marker,
the run's fingerprint and rows hash, triplet counts, the ids of the questions trained on), the
base model (name, files sha256), every setting, the triplet counts and the sha256 of the
triplet list, the loss curve, steps, wall time, package versions and the sha256 of every output
file. Training is deterministic under ``seed`` on one machine and library versions.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engram_eval.analysis.folds import fold_unit as fold_unit  # re-exported
from engram_eval.analysis.folds import in_fold as in_fold
from engram_eval.analysis.folds import parse_fold as parse_fold
from engram_eval.analysis.train_reranker import (
    _capped,
    _most_question_like,
    _package_versions,
    combined_counts,
    distinct_parts,
    excluded_record,
    training_part,
)
from engram_eval.data.records import Question, Session, has_chat_roles, user_turns
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import atomic_write, refuse_links, remove_contained, sha256_file

CARD_KIND = "engram-eval/encoder-card"
LOSSES = ("mnrl",)


@dataclass(frozen=True)
class EncoderTrainSettings:
    """Every setting of ``train-encoder`` (recorded in the card; CLI flags are made from it)."""

    base_model: str = "all-MiniLM-L6-v2"  # the bundled MiniLM the dense signal uses by default
    loss: str = "mnrl"             # MultipleNegativesRankingLoss (in-batch + hard negatives)
    max_seq_length: int = 128      # tokens of a question or a turn while training
    hard_negatives: int = 1        # negative columns per triplet (mined from the run)
    negative_depth: int = 20       # how deep in the run's ranking hard negatives are taken
    unmarked_positives: int = 2    # positives of a question whose answer sessions mark no turn
    epochs: int = 2
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    max_steps: int = 0             # 0: the epochs decide
    time_budget_s: float = 0.0     # 0: none; else training stops after this many seconds
    seed: int = 0
    #: "I/N": leave out the questions whose fold unit (the id's part before ':') falls in
    #: fold I of N (module docstring); "" trains on the whole parts
    exclude_fold: str = ""
    #: at most this many questions of each part give triplets (0: all), chosen by the order
    #: of sha256("seed:question_id")
    max_questions: int = 0

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"train-encoder: loss={self.loss!r}; one of {list(LOSSES)}")
        if self.exclude_fold:
            parse_fold(self.exclude_fold)
        checks = [("max_seq_length", 16 <= self.max_seq_length <= 8192),
                  ("hard_negatives", 0 <= self.hard_negatives <= 64),
                  ("negative_depth", 1 <= self.negative_depth <= 100000),
                  ("unmarked_positives", 0 <= self.unmarked_positives <= 1000),
                  ("epochs", 1 <= self.epochs <= 1000), ("batch_size", 2 <= self.batch_size),
                  ("learning_rate", 0 < self.learning_rate < 1),
                  ("warmup_ratio", 0 <= self.warmup_ratio < 1),
                  ("max_steps", self.max_steps >= 0), ("time_budget_s", self.time_budget_s >= 0),
                  ("max_questions", self.max_questions >= 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"train-encoder: {name}={getattr(self, name)!r} is out of "
                                  "range")


@dataclass(frozen=True)
class Triplet:
    question_id: str
    session_id: str
    turn_index: int
    kind: str  # marked | unmarked (how the positive was found)
    anchor: str
    positive: str
    negatives: tuple[str, ...]
    negative_kinds: tuple[str, ...]  # hard | random, per negative


def _indexed_turns(s: Session, roles: bool) -> list[tuple[int, str]]:
    """(turn index, text) of the turns the dense signal indexes: user turns of a chat, every
    turn of people's chats."""
    return [(t.index, t.content) for t in user_turns(s, roles) if t.content.strip()]


def _positives(q: Question, roles: bool, s: EncoderTrainSettings
               ) -> list[tuple[Session, int, str]]:
    """(session, turn index, kind) of the question's positives (module docstring)."""
    gold = set(q.answer_session_ids)
    evidence = q.get_extra("evidence_dia_ids")
    ids = {str(x) for x in evidence} if isinstance(evidence, (list, tuple)) else set()
    marked = [(sess, t.index, "marked") for sess in q.sessions if sess.session_id in gold
              for t in sess.turns if t.content.strip()
              and (t.has_answer or (t.turn_id and t.turn_id in ids))]
    if marked or not s.unmarked_positives:
        return marked
    out: list[tuple[Session, int, str]] = []
    for sess in q.sessions:
        if sess.session_id not in gold:
            continue
        turns = _indexed_turns(sess, roles)
        while turns and len(out) < s.unmarked_positives:
            k, _ = _most_question_like(q.question, turns)
            out.append((sess, k, "unmarked"))
            turns = [t for t in turns if t[0] != k]
    return out[: s.unmarked_positives]


def _negatives(q: Question, ranked: Sequence[Session], roles: bool,
               s: EncoderTrainSettings) -> tuple[list[str], list[str]]:
    """(texts, kinds) of the question's ``hard_negatives`` negatives: the most question-like
    turn of each of the first non-gold ranked sessions, then seeded random non-gold turns."""
    gold = set(q.answer_session_ids)
    texts: list[str] = []
    used: set[str] = set()
    for sess in ranked:
        if len(texts) >= s.hard_negatives:
            break
        turns = _indexed_turns(sess, roles)
        if sess.session_id in gold or not turns:
            continue
        texts.append(_most_question_like(q.question, turns)[1])
        used.add(sess.session_id)
    kinds = ["hard"] * len(texts)
    if len(texts) < s.hard_negatives:
        pool = [(sess.session_id, k, t) for sess in q.sessions
                if sess.session_id not in gold and sess.session_id not in used
                for k, t in _indexed_turns(sess, roles)]
        rng = random.Random(f"{s.seed}:{q.question_id}")
        for _, _, t in rng.sample(pool, min(s.hard_negatives - len(texts), len(pool))):
            texts.append(t)
            kinds.append("random")
    return texts, kinds


def build_triplets(questions: Sequence[Question], rankings: dict[str, Sequence[str]],
                   s: EncoderTrainSettings) -> tuple[list[Triplet], dict[str, Any]]:
    """The triplets of the module docstring and their counts (``skipped`` per reason)."""
    out: list[Triplet] = []
    skipped: dict[str, list[str]] = {"no_evidence_turn": [], "not_in_run": [],
                                     "no_negative": []}
    for q in questions:
        roles = has_chat_roles(q.sessions)
        positives = _positives(q, roles, s)
        if not positives:
            skipped["no_evidence_turn"].append(q.question_id)
            continue
        if q.question_id not in rankings:
            skipped["not_in_run"].append(q.question_id)
            continue
        by_id = {x.session_id: x for x in q.sessions}
        ranked = [by_id[i] for i in rankings[q.question_id][: s.negative_depth] if i in by_id]
        negs, kinds = _negatives(q, ranked, roles, s)
        if len(negs) < s.hard_negatives:
            skipped["no_negative"].append(q.question_id)
            continue
        for sess, k, kind in positives:
            out.append(Triplet(q.question_id, sess.session_id, k, kind, q.question,
                               sess.turns[k].content, tuple(negs), tuple(kinds)))
    counts = {"triplets": len(out),
              "marked": sum(t.kind == "marked" for t in out),
              "unmarked": sum(t.kind == "unmarked" for t in out),
              "hard_negatives": sum(k == "hard" for t in out for k in t.negative_kinds),
              "random_negatives": sum(k == "random" for t in out for k in t.negative_kinds),
              "questions_used": len({t.question_id for t in out}),
              "questions_skipped": {k: len(v) for k, v in skipped.items()},
              "skipped_ids": skipped}
    return out, counts


def triplets_sha256(triplets: Sequence[Triplet]) -> str:
    h = hashlib.sha256()
    for t in triplets:
        h.update(json.dumps(asdict(t), sort_keys=True, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _part_triplets(part_p: Path, run: str | Path, s: EncoderTrainSettings
                   ) -> tuple[list[Triplet], dict[str, Any], dict[str, Any], list[str]]:
    """One part's checks and triplets: (triplets, counts, card entry, left-out ids)."""
    fold = parse_fold(s.exclude_fold) if s.exclude_fold else None
    tp = training_part(part_p, run, "an encoder is trained on tuning parts only",
                       (lambda qid: in_fold(qid, fold)) if fold else None)
    capped = _capped(tp.questions, s)  # type: ignore[arg-type]  # same two fields
    triplets, counts = build_triplets(capped, tp.rankings, s)
    entry = {**tp.entry, "questions_considered": len(capped),
             "triplets": {k: v for k, v in counts.items() if k != "skipped_ids"},
             "trained_question_ids": sorted({t.question_id for t in triplets})}
    return triplets, counts, entry, tp.left_out


def _claim(out: Path, card_path: Path) -> Path:
    """Refuse a finished or half-finished output; remove a stale staging directory left by a
    killed call; return the staging path."""
    staging = out.parent / f".{out.name}.partial"
    refuse_links(out, card_path, staging)
    if card_path.exists():
        raise ProvenanceError(f"{card_path}: exists; train-encoder never overwrites")
    if out.exists():
        raise ProvenanceError(f"{out}: exists without its card {card_path.name} (a "
                              "train-encoder killed after its last step, or another file); "
                              "remove it or choose another output")
    if staging.exists():  # ours by name: a killed call's unfinished model
        remove_contained(staging, out.parent)
    return staging


def train_encoder(part: str | Path, run: str | Path, output: str | Path,
                  settings: EncoderTrainSettings | None = None, *, log: Any = None,
                  also: Sequence[tuple[str | Path, str | Path]] = ()) -> dict[str, Any]:
    """See the module docstring (``also``: more (part, run) pairs). Returns the card."""
    from engram_eval.retrieval.models import resolve_model

    s = settings or EncoderTrainSettings()
    out = Path(output)
    card_path = Path(str(out) + ".card.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = _claim(out, card_path)
    todo = distinct_parts("train-encoder", part, run, also)
    base = resolve_model(s.base_model, "embedding")
    triplets: list[Triplet] = []
    entries: list[dict[str, Any]] = []
    all_counts: list[dict[str, Any]] = []
    left_out: list[str] = []
    for part_p, run_p in todo:
        got, counts, entry, lo = _part_triplets(part_p, run_p, s)
        if not got:
            raise ConfigError(f"{part_p}: no question gives a triplet (evidence turn and "
                              f"{s.hard_negatives} negatives); nothing to train on")
        triplets += got
        entries.append(entry)
        all_counts.append(counts)
        left_out += lo
    if len(triplets) < s.batch_size:
        raise ConfigError(f"train-encoder: {len(triplets)} triplets, fewer than one batch "
                          f"({s.batch_size}); lower --batch-size")
    kinds = ("triplets", "marked", "unmarked", "hard_negatives", "random_negatives",
             "questions_used")
    totals, skipped = combined_counts(all_counts, kinds)
    if log is not None:
        log(f"train-encoder: {totals['triplets']} triplets from {totals['questions_used']} "
            f"questions of {len(todo)} part(s)")
    t0 = time.time()
    try:
        history = _fit(triplets, base.path, staging, s, log)
        files = {p.relative_to(staging).as_posix(): sha256_file(p)
                 for p in sorted(staging.rglob("*")) if p.is_file()}
        staging.rename(out)
    finally:
        if staging.exists():
            remove_contained(staging, out.parent, ignore_errors=True)
    wall = time.time() - t0
    card = {
        "kind": CARD_KIND, "parts": entries,
        "base_model": base.to_json(), "settings": asdict(s),
        "triplets": totals, "skipped_ids": skipped, "triplets_sha256": triplets_sha256(triplets),
        "excluded_questions": excluded_record("fold", s.exclude_fold, left_out),
        "training": history, "wall_seconds": round(wall, 3),
        "packages": _package_versions(), "output_files": files,
        "usage": f"run --embedding-model {out}",
    }
    atomic_write(card_path, json.dumps(card, indent=2, sort_keys=True) + "\n")
    return card


def _fit(triplets: Sequence[Triplet], base_dir: str, out: Path, s: EncoderTrainSettings,
         log: Any) -> dict[str, Any]:
    """Fine-tune with sentence-transformers' trainer; returns the loss curve."""
    from engram_eval.analysis.fit_loop import run_training

    def build(args: dict[str, Any], callbacks: list[Any]) -> Any:
        from datasets import Dataset
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer.losses import (
            MultipleNegativesRankingLoss,
        )
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers,
            SentenceTransformerTrainingArguments,
        )

        model = SentenceTransformer(base_dir, device="cpu", local_files_only=True)
        model.max_seq_length = s.max_seq_length
        columns: dict[str, list[str]] = {"anchor": [t.anchor for t in triplets],
                                         "positive": [t.positive for t in triplets]}
        for j in range(s.hard_negatives):
            columns[f"negative_{j + 1}"] = [t.negatives[j] for t in triplets]
        targs = SentenceTransformerTrainingArguments(
            **args, batch_sampler=BatchSamplers.NO_DUPLICATES)
        return SentenceTransformerTrainer(model=model, args=targs,
                                          train_dataset=Dataset.from_dict(columns),
                                          loss=MultipleNegativesRankingLoss(model),
                                          callbacks=callbacks)

    trainer, history = run_training("train-encoder", s, log, build)
    trainer.model.save_pretrained(str(out))
    return history
