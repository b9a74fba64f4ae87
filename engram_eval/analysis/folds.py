"""Folds whose unit is a question's id prefix: the rule the training commands leave a fold out
by (``train-encoder --exclude-fold``, ``train-reranker --exclude-fold``) and ``choose_rerank``
checks a fold run against.

A question is in fold ``I`` of ``N`` when the sha256 of its *fold unit* modulo N is I (the rule
of ``run --shard``, :func:`engram_eval.runs.shard.shard_of`); the unit is the id's part before
``:`` -- a LoCoMo conversation, so a fold never trains on a conversation it is then scored on;
a LongMemEval id has no ``:``, so there the unit is the question itself.
"""

from __future__ import annotations

from engram_eval.errors import ConfigError


def parse_fold(spec: str, command: str = "train-encoder") -> tuple[int, int]:
    """``"I/N"`` -> (I, N) with 0 <= I < N and N >= 2; one clear error (naming ``command``)
    otherwise."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ConfigError(f"{command}: exclude_fold={spec!r}: expected I/N, e.g. 0/2"
                          ) from None
    if not (n >= 2 and 0 <= i < n):
        raise ConfigError(f"{command}: exclude_fold={spec!r}: need N >= 2 and 0 <= I < N")
    return i, n


def fold_unit(question_id: str) -> str:
    """The unit a fold keeps together: the id's part before ``:`` (a LoCoMo conversation)."""
    return question_id.split(":", 1)[0]


def in_fold(question_id: str, fold: tuple[int, int]) -> bool:
    """Whether ``question_id``'s unit falls in ``fold`` (I, N)."""
    from engram_eval.runs.shard import shard_of

    return shard_of(fold_unit(question_id), fold[1]) == fold[0]
