"""``engram-eval train-reranker``: train a cross-encoder on a tuning part, with a model card.

``train-reranker PART --run RUN --output DIR`` builds (question, turn) pairs from a dataset
part and a finished run's rankings on that part, fine-tunes a cross-encoder with
sentence-transformers' ``CrossEncoderTrainer`` (binary cross-entropy on one logit), and
writes the model directory ``DIR`` plus its card ``DIR.card.json``. The result is used like
any reranker: ``run --rerank --reranker-model DIR --rerank-unit turn``.

Pairs (deterministic: the same part, run and settings give the same pairs, in order):

* **Positives**: the gold sessions' user turns that carry the dataset's evidence mark --
  ``has_answer`` in LongMemEval, the QA item's resolved evidence ``dia_id`` in LoCoMo (every
  turn counts as user text there: no chat roles). A question without such a turn (LongMemEval
  abstention and single-session-assistant questions, whose evidence is in assistant turns)
  gives no pair and is counted in the card.
* **Hard negatives**: for the first ``hard_negatives`` non-gold sessions of the run's ranking
  (within its first ``negative_depth``), the user turn that shares the most content terms
  with the question (ties: the earlier turn) -- the turn most likely to fool the model.
* **Random negatives**: ``random_negatives`` user turns of other non-gold sessions, drawn
  with a generator seeded by (seed, question id).
* **"Nothing here" groups** (``unanswerable_negatives`` N > 0; off by default): an
  unanswerable question (LongMemEval ``_abs``) gives its first N sessions of the run's ranking,
  each by its most question-like user turn, all negative (kind ``absent``), so the model
  learns that a close topic is not an answer.

Refusals: a part marked held-out (its ``.split.json`` marker, or its content matching a
held-out part the package can see), a run made on other data (the run's dataset sha256 must
be the part's), an existing output, a part without any positive.

Several parts (``--also PART RUN``, e.g. the tune parts of two datasets) train one model: each
part is checked and paired with its own run as above, the pairs are concatenated in the order
the parts are given, and ``max_questions`` (when set) caps each part at that many questions,
taken in a fixed order (sha256 of seed and question id), so that a large part does not drown a
small one.

The card records the part (path, sha256, split-manifest sha256 and part name from its
marker) and the run (path, fingerprint, rows sha256) of the first part under ``part`` and
``run``, and every part under ``parts`` (each with its run, pair counts and the ids of the
questions that gave pairs, so a later check can prove a question was never trained on), the base model (name, path, files sha256),
every setting, the pair counts (and per-question skips), the sha256 of the pair list, the loss
curve, the wall time and steps, package versions, and the sha256 of every output file. CPU
training with fixed seeds repeats on the same machine and library versions; across machines
float summation may differ, so ``verify`` checks a reranked run against the recorded model
files' hashes rather than expecting a retrained model to match bit for bit.
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

from engram_eval.data.records import Question, Session, has_chat_roles, user_turns
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.io import atomic_write, refuse_links, sha256_file
from engram_eval.retrieval.bm25 import tokenize

CARD_KIND = "engram-eval/reranker-card"


@dataclass(frozen=True)
class TrainSettings:
    """Every setting of ``train-reranker`` (recorded in the card)."""

    base_model: str = "all-MiniLM-L6-v2"  # bundled MiniLM (a bi-encoder: a new 1-logit head)
    max_length: int = 128          # tokens of (question, turn); turn-level rerank uses the same
    # defaults: the settings of the reranker published in PROVENANCE.md section 6
    hard_negatives: int = 5        # non-gold sessions of the run's ranking giving a turn each
    negative_depth: int = 20       # how deep in the run's ranking hard negatives are taken
    random_negatives: int = 3      # random non-gold user turns per question
    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 4e-5
    warmup_ratio: float = 0.1
    max_steps: int = 0             # 0: the epochs decide
    time_budget_s: float = 0.0     # 0: none; else training stops after this many seconds
    seed: int = 0
    #: "I/N": leave out the questions ``run --shard I/N`` selects (k-fold: the reranker of
    #: fold I never sees the questions its fold is then scored on); "" trains on the whole part
    exclude_shard: str = ""
    #: "I/N": leave out the questions whose fold unit falls in fold I of N, the unit being the
    #: id's part before ':' (a LoCoMo conversation: the reranker of fold I never sees a
    #: conversation its fold is then scored on; LongMemEval: the question, as ``exclude_shard``);
    #: the rule of ``train-encoder --exclude-fold``. At most one of the two is given
    exclude_fold: str = ""
    #: at most this many questions of each part give pairs (0: all), chosen by the order of
    #: sha256("seed:question_id") (deterministic, independent of file order)
    max_questions: int = 0
    #: "nothing here" groups: each question whose answer is in no session (LongMemEval's
    #: ``_abs``) gives its first this many sessions of the run's ranking (within
    #: ``negative_depth``), each by its most question-like user turn, as negatives (kind
    #: ``absent``); 0: such a question gives no pair (counted under ``no_evidence_turn``)
    unanswerable_negatives: int = 0

    def __post_init__(self) -> None:
        if self.exclude_shard:
            from engram_eval.runs.shard import parse_shard

            try:
                parse_shard(self.exclude_shard)
            except (ValueError, ConfigError) as e:
                raise ConfigError(f"train-reranker: exclude_shard={self.exclude_shard!r}: "
                                  f"{e}") from None
        if self.exclude_fold:
            from engram_eval.analysis.folds import parse_fold

            parse_fold(self.exclude_fold, "train-reranker")
            if self.exclude_shard:
                raise ConfigError("train-reranker: give exclude_shard or exclude_fold, not both")
        checks = [("max_length", 16 <= self.max_length <= 8192),
                  ("hard_negatives", 0 <= self.hard_negatives <= 1000),
                  ("negative_depth", 1 <= self.negative_depth <= 100000),
                  ("random_negatives", 0 <= self.random_negatives <= 1000),
                  ("epochs", 1 <= self.epochs <= 1000), ("batch_size", 1 <= self.batch_size),
                  ("learning_rate", 0 < self.learning_rate < 1),
                  ("warmup_ratio", 0 <= self.warmup_ratio < 1),
                  ("max_steps", self.max_steps >= 0), ("time_budget_s", self.time_budget_s >= 0),
                  ("max_questions", self.max_questions >= 0),
                  ("unanswerable_negatives", self.unanswerable_negatives >= 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"train-reranker: {name}={getattr(self, name)!r} is out of "
                                  "range")


@dataclass(frozen=True)
class Pair:
    question_id: str
    session_id: str
    turn_index: int
    label: float  # 1.0 evidence turn, 0.0 negative
    kind: str  # positive | hard | random | absent
    question: str
    text: str


def _evidence_turns(q: Question, roles: bool) -> list[tuple[Session, int]]:
    """(session, turn index) of the question's evidence user turns in its gold sessions."""
    gold = set(q.answer_session_ids)
    evidence = q.get_extra("evidence_dia_ids")
    ids = {str(x) for x in evidence} if isinstance(evidence, (list, tuple)) else set()
    out = []
    for s in q.sessions:
        if s.session_id not in gold:
            continue
        for t in s.turns:
            if (t.role == "user" or not roles) and t.content.strip() and (
                    t.has_answer or (t.turn_id and t.turn_id in ids)):
                out.append((s, t.index))
    return out


def _user_turn_candidates(s: Session, roles: bool) -> list[tuple[int, str]]:
    return [(t.index, t.content) for t in user_turns(s, roles) if t.content.strip()]


def _most_question_like(question: str, turns: Sequence[tuple[int, str]]) -> tuple[int, str]:
    q = set(tokenize(question))
    best = max(turns, key=lambda it: (len(q & set(tokenize(it[1]))), -it[0]))
    return best


def _question_like_negatives(q: Question, sessions: Sequence[Session], roles: bool, n: int,
                             kind: str) -> list[Pair]:
    """Negatives from the first ``n`` of ``sessions`` (ranking order) that hold user text: each
    by its user turn most like the question. Hard negatives take the non-gold sessions; an
    unanswerable question's all-negative group (kind ``absent``) takes every ranked session,
    the gold ones too (the answer is in none of them)."""
    out: list[Pair] = []
    for s in sessions:
        if len(out) >= n:
            break
        turns = _user_turn_candidates(s, roles)
        if turns:
            k, text = _most_question_like(q.question, turns)
            out.append(Pair(q.question_id, s.session_id, k, 0.0, kind, q.question, text))
    return out


def build_pairs(questions: Sequence[Question], rankings: dict[str, Sequence[str]],
                settings: TrainSettings) -> tuple[list[Pair], dict[str, Any]]:
    """The pairs of the module docstring and their counts (``skipped`` per reason)."""
    pairs: list[Pair] = []
    skipped: dict[str, list[str]] = {"no_evidence_turn": [], "not_in_run": []}
    for q in questions:
        roles = has_chat_roles(q.sessions)
        by_id = {s.session_id: s for s in q.sessions}
        absent = bool(settings.unanswerable_negatives) and q.is_abstention
        positives = [] if absent else _evidence_turns(q, roles)
        if not absent and not positives:
            skipped["no_evidence_turn"].append(q.question_id)
            continue
        if q.question_id not in rankings:
            skipped["not_in_run"].append(q.question_id)
            continue
        ranked = [by_id[sid] for sid in rankings[q.question_id][: settings.negative_depth]
                  if sid in by_id]
        if absent:
            pairs += _question_like_negatives(q, ranked, roles,
                                              settings.unanswerable_negatives, "absent")
            continue
        for s, k in positives:
            pairs.append(Pair(q.question_id, s.session_id, k, 1.0, "positive", q.question,
                              s.turns[k].content))
        gold = set(q.answer_session_ids)
        hard = _question_like_negatives(q, [s for s in ranked if s.session_id not in gold],
                                        roles, settings.hard_negatives, "hard")
        pairs += hard
        used = {p.session_id for p in hard}
        pool = [s for s in q.sessions if s.session_id not in gold and s.session_id not in used
                and _user_turn_candidates(s, roles)]
        rng = random.Random(f"{settings.seed}:{q.question_id}")
        for s in rng.sample(pool, min(settings.random_negatives, len(pool))):
            k, text = rng.choice(_user_turn_candidates(s, roles))
            pairs.append(Pair(q.question_id, s.session_id, k, 0.0, "random", q.question, text))
    counts = {"pairs": len(pairs),
              "positive": sum(p.kind == "positive" for p in pairs),
              "hard": sum(p.kind == "hard" for p in pairs),
              "random": sum(p.kind == "random" for p in pairs),
              **({"absent": sum(p.kind == "absent" for p in pairs)}
                 if settings.unanswerable_negatives else {}),
              "questions_used": len({p.question_id for p in pairs}),
              "questions_skipped": {k: len(v) for k, v in skipped.items()},
              "skipped_ids": skipped}
    return pairs, counts


def pairs_sha256(pairs: Sequence[Pair]) -> str:
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps(asdict(p), sort_keys=True, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def refuse_heldout(part: Path, purpose: str = "a reranker is trained on a tuning part only"
                   ) -> dict[str, Any] | None:
    """The part's split marker (None when it has none); ProvenanceError for a held-out
    part by its marker, and for any file holding held-out data
    (:func:`engram_eval.provenance.guard.refuse_heldout`); ``purpose`` ends the message."""
    from engram_eval.data.split import part_marker

    marker = part_marker(part)
    if marker is not None and marker.get("part") == "heldout":
        raise ProvenanceError(f"{part}: this is a held-out part (its split marker says so); "
                              f"{purpose}")
    from engram_eval.provenance.guard import refuse_heldout as guard

    # the one held-out guard: a link, a copy, a gzip, a subset or a mixture too
    guard(part, purpose)
    return marker


def _package_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("engram-eval", "torch", "sentence-transformers", "transformers", "datasets"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _capped(questions: Sequence[Question], s: TrainSettings) -> tuple[Question, ...]:
    """The first ``max_questions`` of ``questions`` by sha256(seed:id), in file order."""
    if not s.max_questions or len(questions) <= s.max_questions:
        return tuple(questions)
    key = {q.question_id: hashlib.sha256(f"{s.seed}:{q.question_id}".encode()).hexdigest()
           for q in questions}
    keep = set(sorted(key, key=lambda qid: (key[qid], qid))[: s.max_questions])
    return tuple(q for q in questions if q.question_id in keep)


@dataclass(frozen=True)
class TrainingPart:
    """A tuning part checked for training (held-out guard, the run made on it), its questions
    less the left-out fold, and the card entry's fields that do not depend on the pairs."""

    questions: tuple[Question, ...]
    left_out: list[str]
    rankings: dict[str, Sequence[str]]
    entry: dict[str, Any]


def training_part(part_p: Path, run: str | Path, purpose: str,
                  leave_out: Any = None) -> TrainingPart:
    """The checks every training command makes of a part and its run: neither held out (the
    part by :func:`refuse_heldout` with ``purpose``, the run by the guard's run check), the run
    made on this very part; ``leave_out(question_id)`` marks the questions of a fold."""
    from engram_eval.data.datasets import load_questions
    from engram_eval.provenance.guard import refuse_heldout_run
    from engram_eval.runs.reader import read_run

    marker = refuse_heldout(part_p, purpose)
    part_sha = sha256_file(part_p)
    finished = read_run(run, require_sidecar=True)
    if finished.dataset_sha256 != part_sha:
        raise ProvenanceError(f"{run}: was made on data with sha256 {finished.dataset_sha256}, "
                              f"not on {part_p} ({part_sha}); train on the run of this part")
    refuse_heldout_run(finished.metadata, run, purpose)
    _, questions = load_questions(part_p)
    left_out = [q.question_id for q in questions if leave_out and leave_out(q.question_id)]
    kept = tuple(q for q in questions if q.question_id not in set(left_out))
    entry = {"path": str(part_p), "sha256": part_sha,
             "split_manifest_sha256": (marker or {}).get("split_manifest_sha256"),
             "split_part": (marker or {}).get("part"),
             "run": {"path": str(run), "fingerprint": finished.fingerprint,
                     "rows_sha256": finished.rows_sha256},
             "questions_available": len(kept)}
    rankings = {r["question_id"]: r["ranked_session_ids"] for r in finished.rows}
    return TrainingPart(kept, left_out, rankings, entry)


def _part_pairs(part_p: Path, run: str | Path, s: TrainSettings
                ) -> tuple[list[Pair], dict[str, Any], dict[str, Any], list[str]]:
    """One part's checks and pairs: (pairs, counts, card entry, left-out ids)."""
    leave_out = None
    if s.exclude_shard:
        from engram_eval.runs.shard import parse_shard, shard_of

        fold = parse_shard(s.exclude_shard)
        assert fold is not None
        leave_out = lambda qid: shard_of(qid, fold[1]) == fold[0]  # noqa: E731
    elif s.exclude_fold:
        from engram_eval.analysis.folds import in_fold, parse_fold

        unit_fold = parse_fold(s.exclude_fold, "train-reranker")
        leave_out = lambda qid: in_fold(qid, unit_fold)  # noqa: E731
    tp = training_part(part_p, run, "a reranker is trained on a tuning part only", leave_out)
    questions = _capped(tp.questions, s)
    pairs, counts = build_pairs(questions, tp.rankings, s)
    entry = {**tp.entry, "questions_considered": len(questions),
             "pairs": {k: v for k, v in counts.items() if k != "skipped_ids"},
             "trained_question_ids": sorted({p.question_id for p in pairs})}
    return pairs, counts, entry, tp.left_out


def distinct_parts(command: str, part: str | Path, run: str | Path,
                   also: Sequence[tuple[str | Path, str | Path]]
                   ) -> list[tuple[Path, str | Path]]:
    """The (part, run) pairs a training command was given, the first part first; one
    :class:`ConfigError` when a part is given twice (by content)."""
    todo = [(Path(part), run)] + [(Path(p), r) for p, r in also]
    shas = [sha256_file(p) for p, _ in todo]
    if len(set(shas)) != len(shas):
        raise ConfigError(f"{command}: the same part is given twice")
    return todo


def combined_counts(all_counts: Sequence[dict[str, Any]], kinds: Sequence[str]
                    ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The card's totals over the parts' counts (``kinds`` summed, skipped questions counted
    per reason) and the skipped question ids per reason, parts in order."""
    totals: dict[str, Any] = {k: sum(c[k] for c in all_counts) for k in kinds}
    totals["questions_skipped"] = {k: sum(c["questions_skipped"][k] for c in all_counts)
                                   for k in all_counts[0]["questions_skipped"]}
    skipped = {k: [i for c in all_counts for i in c["skipped_ids"][k]]
               for k in all_counts[0]["skipped_ids"]}
    return totals, skipped


def excluded_record(key: str, spec: str, left_out: Sequence[str]) -> dict[str, Any]:
    """The card's ``excluded_questions``: the fold rule (under ``key``), how many questions it
    left out and the sha256 of their sorted ids."""
    return {key: spec or None, "count": len(left_out),
            "ids_sha256": hashlib.sha256("\n".join(sorted(left_out)).encode("utf-8")).hexdigest()}


def train(part: str | Path, run: str | Path, output: str | Path,
          settings: TrainSettings | None = None, *, log: Any = None,
          also: Sequence[tuple[str | Path, str | Path]] = ()) -> dict[str, Any]:
    """See the module docstring (``also``: more (part, run) pairs). Returns the card."""
    from engram_eval.retrieval.models import resolve_model

    s = settings or TrainSettings()
    out = Path(output)
    card_path = Path(str(out) + ".card.json")
    refuse_links(out, card_path)  # a link (dangling or not) where an output goes
    for p in (out, card_path):
        if p.exists():
            raise ProvenanceError(f"{p}: exists; train-reranker never overwrites")
    todo = distinct_parts("train-reranker", part, run, also)
    base = resolve_model(s.base_model, "embedding")
    pairs: list[Pair] = []
    entries: list[dict[str, Any]] = []
    all_counts: list[dict[str, Any]] = []
    left_out: list[str] = []
    for part_p, run_p in todo:
        got, counts, entry, lo = _part_pairs(part_p, run_p, s)
        if not counts["positive"]:
            raise ConfigError(f"{part_p}: no question has an evidence turn; nothing to train on")
        pairs += got
        entries.append(entry)
        all_counts.append(counts)
        left_out += lo
    kinds = ("pairs", "positive", "hard", "random", "questions_used") + (
        ("absent",) if s.unanswerable_negatives else ())
    totals, skipped = combined_counts(all_counts, kinds)
    t0 = time.time()
    history = _fit(pairs, base.path, out, s, log)
    wall = time.time() - t0
    files = {p.relative_to(out).as_posix(): sha256_file(p)
             for p in sorted(out.rglob("*")) if p.is_file()}
    first = entries[0]
    card = {
        "kind": CARD_KIND,
        "part": {k: first[k] for k in ("path", "sha256", "split_manifest_sha256",
                                       "split_part")},
        "run": first["run"], "parts": entries,
        "base_model": base.to_json(), "settings": asdict(s),
        "pairs": totals, "skipped_ids": skipped, "pairs_sha256": pairs_sha256(pairs),
        "excluded_questions": (excluded_record("fold", s.exclude_fold, left_out)
                               if s.exclude_fold
                               else excluded_record("shard", s.exclude_shard, left_out)),
        "training": history, "wall_seconds": round(wall, 3),
        "packages": _package_versions(), "output_files": files,
        "usage": f"run --rerank --reranker-model {out} --rerank-unit turn "
                 f"--rerank-max-length {s.max_length}",
    }
    atomic_write(card_path, json.dumps(card, indent=2, sort_keys=True) + "\n")
    return card


def _fit(pairs: Sequence[Pair], base_dir: str, out: Path, s: TrainSettings,
         log: Any) -> dict[str, Any]:
    """Fine-tune with sentence-transformers' CrossEncoderTrainer; returns the loss curve."""
    from engram_eval.analysis.fit_loop import run_training

    def build(args: dict[str, Any], callbacks: list[Any]) -> Any:
        from datasets import Dataset
        from sentence_transformers.cross_encoder import (
            CrossEncoder,
            CrossEncoderTrainer,
            CrossEncoderTrainingArguments,
        )
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

        model = CrossEncoder(base_dir, num_labels=1, max_length=s.max_length, device="cpu")
        data = Dataset.from_dict({"question": [p.question for p in pairs],
                                  "text": [p.text for p in pairs],
                                  "label": [p.label for p in pairs]})
        return CrossEncoderTrainer(model=model, args=CrossEncoderTrainingArguments(**args),
                                   train_dataset=data, loss=BinaryCrossEntropyLoss(model),
                                   callbacks=callbacks)

    trainer, history = run_training("train-reranker", s, log, build)
    trainer.model.save_pretrained(str(out))
    return history
