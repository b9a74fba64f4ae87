"""Per-question retrieval metrics over gold ids and a ranking; aggregation kept separate.

Every function here is pure: it reads its arguments, never mutates them, and returns a new
value. Metric names use the ``name@k`` form everywhere (``recall_any@5``, ``ndcg_any@10``);
MRR has no cut-off and is called ``mrr``.

Conventions (checked against the LongMemEval reference scorer, ``src/retrieval/eval_utils.py``
and ``src/retrieval/run_retrieval.py`` of github.com/xiaowu0162/LongMemEval):

* A *ranking* is a duplicate-free sequence of ids, best first (session ids for session-level
  metrics, turn ids for :func:`session_metrics_from_turns`). A ranking with a repeated id is
  rejected with ``ValueError``: a repeated id would count one document twice.
* *Gold* is any collection of ids; it is treated as a set (repeats are ignored).
* ``k`` must be a positive int: ``k <= 0`` raises ``ValueError`` (a non-int ``TypeError``). A ``k`` larger than the ranking just
  means "the whole ranking".
* No gold (empty collection), as in the reference: ``recall_any@k = 0.0`` (``any`` of
  nothing), ``recall_all@k = 1.0`` (``all`` of nothing), ``ndcg_any@k = 0.0`` (the reference
  returns 0 when the ideal DCG is 0), ``hit@k = 0.0``, ``mrr = 0.0``.
* DCG uses the reference's discount: gain at rank 1 counts fully, gain at rank ``i >= 2`` is
  divided by ``log2(i)``; so ranks 1 and 2 weigh the same (``1 / log2(2) == 1``).
* The ideal DCG of ``ndcg_any@k`` puts ``min(len(gold), k)`` relevant items first, counting
  *every* gold id, so a gold id that was never retrieved still lowers the score. The reference
  builds the ideal list from the corpus relevances instead; the two agree whenever every gold
  id is in the corpus and the ranking covers the whole corpus (the reference always ranks the
  whole corpus). They differ only for a gold id absent from the corpus, which the reference
  silently ignores in the ideal DCG and this module counts against the system (it can never
  be retrieved, so recall_all is 0 in both).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

__all__ = [
    "KS",
    "hit",
    "mean_metrics",
    "mrr",
    "ndcg_any",
    "question_metrics",
    "random_baseline",
    "recall_all",
    "reference_entry_metrics",
    "recall_any",
    "rollup_turns",
    "session_metrics_from_turns",
    "turn_cutoff_for_sessions",
]

KS: tuple[int, ...] = (1, 3, 5, 10, 30, 50)
"""The cut-offs reported everywhere (the reference's ``[1, 3, 5, 10, 30, 50]``)."""

SessionOf = Mapping[str, str] | Callable[[str], str]
"""A turn-id → session-id lookup: a mapping or a function."""


# --------------------------------------------------------------------------- validation


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be a positive int, got {k!r}")
    if k <= 0:
        raise ValueError(f"k must be a positive int, got {k}")


def _check_ranking(ranking: Sequence[str], what: str = "ranking") -> None:
    seen: set[str] = set()
    for pos, doc in enumerate(ranking):
        if doc in seen:
            raise ValueError(
                f"{what} must be duplicate-free, but {doc!r} repeats at rank {pos + 1}"
            )
        seen.add(doc)


def _gold_set(gold: Collection[str]) -> frozenset[str]:
    if isinstance(gold, str):
        raise TypeError("gold must be a collection of ids, not a single string")
    return frozenset(gold)


# --------------------------------------------------------------------------- DCG helpers


def _discount(rank: int) -> float:
    """The reference's discount for a 1-based rank: 1 for ranks 1 and 2, else log2(rank)."""
    return 1.0 if rank == 1 else math.log2(rank)


def _dcg(relevances: Sequence[int]) -> float:
    """Binary DCG of a relevance list (already cut to k), reference discount."""
    return math.fsum(
        rel / _discount(i) for i, rel in enumerate(relevances, start=1) if rel
    )


def _ideal_dcg(n_relevant: int) -> float:
    """DCG of ``n_relevant`` relevant items at the top of the list."""
    return math.fsum(1.0 / _discount(i) for i in range(1, n_relevant + 1))


def _ndcg(relevances: Sequence[int], n_ideal: int) -> float:
    """``dcg(relevances) / ideal_dcg(n_ideal)``, 0.0 when the ideal DCG is 0 (reference)."""
    ideal = _ideal_dcg(n_ideal)
    if ideal == 0.0:
        return 0.0
    return _dcg(relevances) / ideal


# --------------------------------------------------------------------------- unchecked cores


def _recall_any(gold: frozenset[str], window: Sequence[str]) -> float:
    return 1.0 if any(doc in gold for doc in window) else 0.0


def _recall_all(gold: frozenset[str], window: Sequence[str]) -> float:
    return 1.0 if gold.issubset(window) else 0.0


def _ndcg_sessions(gold: frozenset[str], ranking: Sequence[str], k: int) -> float:
    relevances = [1 if doc in gold else 0 for doc in ranking[:k]]
    return _ndcg(relevances, min(len(gold), k))


def _mrr(gold: frozenset[str], ranking: Sequence[str]) -> float:
    for rank, doc in enumerate(ranking, start=1):
        if doc in gold:
            return 1.0 / rank
    return 0.0


# --------------------------------------------------------------------------- public metrics


def recall_any(gold: Collection[str], ranking: Sequence[str], k: int) -> float:
    """1.0 if at least one gold id is in ``ranking[:k]``, else 0.0 (0.0 when gold is empty).

    Raises ``ValueError`` for ``k <= 0`` or a ranking with a repeated id.
    """
    _check_k(k)
    _check_ranking(ranking)
    return _recall_any(_gold_set(gold), ranking[:k])


def recall_all(gold: Collection[str], ranking: Sequence[str], k: int) -> float:
    """1.0 if every gold id is in ``ranking[:k]``, else 0.0 (1.0 when gold is empty).

    With more gold ids than ``k`` the answer is necessarily 0.0.
    Raises ``ValueError`` for ``k <= 0`` or a ranking with a repeated id.
    """
    _check_k(k)
    _check_ranking(ranking)
    return _recall_all(_gold_set(gold), ranking[:k])


def hit(gold: Collection[str], ranking: Sequence[str], k: int) -> float:
    """Memo-style hit@k: 1.0 if any gold id appears among the first ``k`` results.

    Numerically identical to :func:`recall_any`; it is kept as its own name because
    Memo-style reports call it "hit rate" and compare it with systems that only report hits.
    0.0 when gold is empty. Raises ``ValueError`` for ``k <= 0`` or a repeated id.
    """
    return recall_any(gold, ranking, k)


def ndcg_any(gold: Collection[str], ranking: Sequence[str], k: int) -> float:
    """Binary-relevance nDCG@k with the reference's discount and an all-gold ideal.

    ``DCG = rel_1 + sum_{i=2..k} rel_i / log2(i)`` over ``ranking[:k]``; the ideal DCG is the
    DCG of ``min(len(gold), k)`` relevant items in a row, counting every gold id (retrieved or
    not). Returns 0.0 when gold is empty (ideal DCG 0, as the reference does). The result lies
    in ``[0, 1]``. Raises ``ValueError`` for ``k <= 0`` or a ranking with a repeated id.
    """
    _check_k(k)
    _check_ranking(ranking)
    return _ndcg_sessions(_gold_set(gold), ranking, k)


def mrr(gold: Collection[str], ranking: Sequence[str]) -> float:
    """Reciprocal rank (1-based) of the first gold id in ``ranking``; 0.0 if none is there.

    Raises ``ValueError`` for a ranking with a repeated id.
    """
    _check_ranking(ranking)
    return _mrr(_gold_set(gold), ranking)


def question_metrics(
    gold: Collection[str], ranking: Sequence[str], ks: Sequence[int] = KS
) -> dict[str, float]:
    """All session-level metrics of one question.

    Returns, for every ``k`` in ``ks`` (in that order), the keys ``recall_any@k``,
    ``recall_all@k``, ``ndcg_any@k`` and ``hit@k``, then ``mrr``. Raises ``ValueError`` for
    an empty ``ks``, a repeated or non-positive ``k``, or a ranking with a repeated id.
    """
    _check_ks(ks)
    _check_ranking(ranking)
    gold_set = _gold_set(gold)
    out: dict[str, float] = {}
    for k in ks:
        window = ranking[:k]
        out[f"recall_any@{k}"] = _recall_any(gold_set, window)
        out[f"recall_all@{k}"] = _recall_all(gold_set, window)
        out[f"ndcg_any@{k}"] = _ndcg_sessions(gold_set, ranking, k)
        out[f"hit@{k}"] = _recall_any(gold_set, window)
    out["mrr"] = _mrr(gold_set, ranking)
    return out


def reference_entry_metrics(
    gold: Collection[str],
    ranking: Sequence[str],
    entries: Mapping[str, int] | None = None,
    ks: Sequence[int] = KS,
) -> dict[str, float]:
    """Session metrics exactly as LongMemEval's ``eval_utils.evaluate_retrieval`` computes them
    when a session id may fill several haystack entries.

    The reference indexes every haystack *entry*; a session id listed ``n`` times is ``n``
    documents with the same id. ``entries`` maps such ids to ``n`` (absent ids count 1); the
    ranking of distinct sessions is expanded so each id takes ``n`` consecutive positions.
    Then, over the expanded list ``E``: ``recall_any@k`` / ``recall_all@k`` = any / all gold
    ids among ``E[:k]``; ``ndcg_any@k`` = binary DCG of ``E[:k]`` (reference discount) over the
    DCG of ``min(R, k)`` relevant entries in a row, ``R`` = the number of gold entries (a gold id
    absent from the ranking counts ``entries.get(id, 1)``); ``hit@k`` = ``recall_any@k``;
    ``mrr`` = reciprocal rank of the first gold entry in ``E``. No gold: 0 / 1 / 0 (and hit
    0, mrr 0). Without repeats this equals :func:`question_metrics`.
    """
    _check_ks(ks)
    _check_ranking(ranking)
    counts = dict(entries or {})
    for sid, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"entries[{sid!r}] must be a positive int, got {n!r}")
    gold_set = _gold_set(gold)
    expanded = [sid for sid in ranking for _ in range(counts.get(sid, 1))]
    relevances = [1 if sid in gold_set else 0 for sid in expanded]
    n_relevant = sum(relevances) + sum(
        counts.get(g, 1) for g in gold_set.difference(ranking)
    )
    out: dict[str, float] = {}
    for k in ks:
        window = expanded[:k]
        out[f"recall_any@{k}"] = _recall_any(gold_set, window)
        out[f"recall_all@{k}"] = _recall_all(gold_set, window)
        out[f"ndcg_any@{k}"] = _ndcg(relevances[:k], min(n_relevant, k))
        out[f"hit@{k}"] = _recall_any(gold_set, window)
    out["mrr"] = _mrr(gold_set, expanded) if expanded else 0.0
    return out


def _check_ks(ks: Sequence[int]) -> None:
    if len(ks) == 0:
        raise ValueError("ks must name at least one cut-off")
    for k in ks:
        _check_k(k)
    if len(set(ks)) != len(ks):
        raise ValueError(f"ks must not repeat a cut-off: {tuple(ks)!r}")


# --------------------------------------------------------------------------- turn → session


def _session_lookup(session_of: SessionOf) -> Callable[[str], str]:
    if isinstance(session_of, Mapping):
        mapping = session_of

        def lookup(turn_id: str) -> str:
            try:
                return mapping[turn_id]
            except KeyError:
                raise ValueError(
                    f"turn {turn_id!r} has no session in session_of"
                ) from None

        return lookup
    if callable(session_of):
        return session_of
    raise TypeError("session_of must be a mapping or a callable")


def rollup_turns(turn_ranking: Sequence[str], session_of: SessionOf) -> list[str]:
    """Distinct sessions of a turn ranking, in first-seen order.

    ``session_of`` maps a turn id to its session id (a mapping or a function). Raises
    ``ValueError`` when the turn ranking repeats a turn or a turn has no session.
    """
    _check_ranking(turn_ranking, "turn ranking")
    lookup = _session_lookup(session_of)
    seen: set[str] = set()
    out: list[str] = []
    for turn in turn_ranking:
        sid = lookup(turn)
        if sid not in seen:
            seen.add(sid)
            out.append(sid)
    return out


def _cutoff(sessions: Sequence[str], k: int) -> tuple[int, bool]:
    """(cut-off, covered): smallest c with k distinct sessions in sessions[:c]."""
    seen: set[str] = set()
    for pos, sid in enumerate(sessions, start=1):
        seen.add(sid)
        if len(seen) >= k:
            return pos, True
    return len(sessions), False


def turn_cutoff_for_sessions(
    turn_ranking: Sequence[str], session_of: SessionOf, k: int
) -> int:
    """The official widened cut-off for session@k over a turn ranking.

    The smallest ``c`` such that ``turn_ranking[:c]`` covers ``k`` distinct sessions, or
    ``len(turn_ranking)`` when the whole ranking covers fewer. This equals the reference's
    ``effective_k`` loop (which starts at ``k`` and grows one turn at a time; a value past
    the end of the ranking slices the same as ``len``). Raises ``ValueError`` for ``k <= 0``,
    a repeated turn or a turn with no session.
    """
    _check_k(k)
    _check_ranking(turn_ranking, "turn ranking")
    lookup = _session_lookup(session_of)
    return _cutoff([lookup(t) for t in turn_ranking], k)[0]


def session_metrics_from_turns(
    gold_sessions: Collection[str],
    turn_ranking: Sequence[str],
    session_of: SessionOf,
    ks: Sequence[int] = KS,
) -> dict[str, float]:
    """Session-level metrics of a turn ranking, as the reference's turn→session scorer.

    For each ``k``: widen the cut-off to ``c = turn_cutoff_for_sessions(turn_ranking,
    session_of, k)`` and evaluate the session ids of ``turn_ranking[:c]``:

    * ``recall_any@k`` / ``recall_all@k`` / ``hit@k``: any / all gold sessions among the
      sessions of the widened window, i.e. among the first ``k`` sessions of
      :func:`rollup_turns` (no gold: 0 / 1 / 0).
    * ``ndcg_any@k`` follows the reference exactly: relevance stays *per turn* (a turn is
      relevant when its session is gold), so two turns of the same gold session both add
      gain, at their own ranks within the widened window of ``c`` turns. The ideal DCG puts
      every relevant turn first, cut to ``c`` (uncut when the ranking holds fewer than ``k``
      sessions, like the reference's ``effective_k`` running past the end). Relevant turns
      are counted over the whole ``turn_ranking`` (the reference ranks the whole corpus), and
      each gold session with no turn in the ranking adds one more relevant item, so a gold
      session never retrieved still counts. No gold → 0.0 (reference: ideal DCG 0 → 0).
    * ``mrr``: reciprocal rank of the first gold session in :func:`rollup_turns`.

    Keys are the same as :func:`question_metrics`. To reproduce ``run_retrieval.py``'s turn
    granularity bit for bit, give turns of an answer session that carry no ``has_answer`` a
    distinct pseudo-session in ``session_of`` (the reference relabels them ``noans_…``, so
    they are neither relevant nor the same session as the evidence turns) and pass only
    user turns. Raises ``ValueError`` for bad ``ks``, a repeated turn or an unmapped turn.
    """
    _check_ks(ks)
    _check_ranking(turn_ranking, "turn ranking")
    lookup = _session_lookup(session_of)
    gold = _gold_set(gold_sessions)
    turn_sessions = [lookup(t) for t in turn_ranking]
    relevances = [1 if sid in gold else 0 for sid in turn_sessions]
    n_relevant_turns = sum(relevances)
    n_gold_unseen = len(gold.difference(turn_sessions))
    n_relevant = n_relevant_turns + n_gold_unseen
    rolled = rollup_turns(turn_ranking, lookup)

    out: dict[str, float] = {}
    for k in ks:
        c, covered = _cutoff(turn_sessions, k)
        window_sessions = rolled[:k]
        out[f"recall_any@{k}"] = _recall_any(gold, window_sessions)
        out[f"recall_all@{k}"] = _recall_all(gold, window_sessions)
        n_ideal = min(n_relevant, c) if covered else n_relevant
        out[f"ndcg_any@{k}"] = _ndcg(relevances[:c], n_ideal)
        out[f"hit@{k}"] = _recall_any(gold, window_sessions)
    out["mrr"] = _mrr(gold, rolled)
    return out


# --------------------------------------------------------------------------- aggregation


def mean_metrics(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Plain (unweighted) mean of each metric over ``rows``.

    Every row must have exactly the same keys, else ``ValueError``; keys keep the first
    row's order. An empty sequence gives ``{}``.
    """
    if len(rows) == 0:
        return {}
    keys = list(rows[0].keys())
    key_set = set(keys)
    for i, row in enumerate(rows):
        if set(row.keys()) != key_set:
            missing = sorted(key_set - set(row.keys()))
            extra = sorted(set(row.keys()) - key_set)
            raise ValueError(
                f"row {i} has different metric keys than row 0 (missing {missing}, extra {extra})"
            )
    n = len(rows)
    return {key: math.fsum(float(row[key]) for row in rows) / n for key in keys}


def random_baseline(n_gold: int, pool: int, k: int) -> dict[str, float]:
    """Expected ``recall_any@k`` and ``recall_all@k`` of a uniformly random ranking.

    ``pool`` candidates of which ``n_gold`` are gold; the top ``min(k, pool)`` of a uniform
    random permutation is a uniform random subset, so the number of gold in it is
    hypergeometric (exact, via ``math.comb``):

    * ``recall_any@k = 1 - C(pool - n_gold, k') / C(pool, k')``
    * ``recall_all@k = C(pool - n_gold, k' - n_gold) / C(pool, k')`` (0 when ``k' < n_gold``)

    with ``k' = min(k, pool)``. ``n_gold = 0`` gives the no-gold convention (0.0, 1.0).
    Raises ``ValueError`` for ``k <= 0``, ``pool < 0`` or ``n_gold`` outside ``[0, pool]``.
    """
    _check_k(k)
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 0:
        raise ValueError(f"pool must be a non-negative int, got {pool!r}")
    if (
        isinstance(n_gold, bool)
        or not isinstance(n_gold, int)
        or not 0 <= n_gold <= pool
    ):
        raise ValueError(f"n_gold must be an int in [0, pool={pool}], got {n_gold!r}")
    kk = min(k, pool)
    total = math.comb(pool, kk)
    any_ = (total - math.comb(pool - n_gold, kk)) / total
    all_ = math.comb(pool - n_gold, kk - n_gold) / total if kk >= n_gold else 0.0
    return {f"recall_any@{k}": any_, f"recall_all@{k}": all_}
