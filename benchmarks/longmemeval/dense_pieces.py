#!/usr/bin/env python
"""Measure what the dense piece rule does on a dataset (no model inference; tokenizer only).

For every distinct session: how many user tokens it has (what a whole-session embedding
would silently lose beyond the model window), how many user turns are split into word
windows, and how many windows had to be halved to fit the token limit. Writes JSON
(exclusively) to --output.

    python benchmarks/longmemeval/dense_pieces.py DATA --output results/.../dense_pieces.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engram_eval.io import exclusive_write, sha256_file  # noqa: E402
from engram_eval.retrieval.dense import user_pieces, word_windows  # noqa: E402
from engram_eval.retrieval.flags import ArgumentParser, output_file  # noqa: E402
from engram_eval.retrieval.holder import token_counter  # noqa: E402
from engram_eval.retrieval.models import resolve_model  # noqa: E402
from engram_eval.runs.config import RunConfig  # noqa: E402
from engram_eval.runs.runner import load_questions  # noqa: E402


def main() -> int:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("dataset")
    ap.add_argument("--output", required=True, type=output_file,
                    help="measurement JSON (must not exist)")
    args = ap.parse_args()
    cfg = RunConfig()
    ref = resolve_model(cfg.embedding_model, "embedding")
    counter = token_counter(ref.path)
    assert counter is not None
    count, limit = counter
    _, questions = load_questions(args.dataset)
    seen = {}
    for q in questions:
        for s in q.sessions:
            seen.setdefault((s.session_id, s.user_text), s)
    session_tokens, turns, split_turns, windows, pieces = [], 0, 0, 0, 0
    for s in seen.values():
        session_tokens.append(count(s.user_text))
        for t in s.turns:
            if t.role != "user":
                continue
            turns += 1
            w = word_windows(t.content, cfg.dense_piece_words, cfg.dense_piece_overlap)
            windows += len(w)
            split_turns += len(w) > 1
        pieces += len(user_pieces([s], cfg.dense_piece_words, cfg.dense_piece_overlap, count,
                                  limit))
    over = sum(n > limit for n in session_tokens)
    out = {
        "dataset": Path(args.dataset).name, "dataset_sha256": sha256_file(args.dataset),
        "model": ref.name, "model_sha256": ref.sha256, "token_limit_without_specials": limit,
        "piece_words": cfg.dense_piece_words, "piece_overlap": cfg.dense_piece_overlap,
        "distinct_sessions": len(seen),
        "session_user_tokens": {"median": statistics.median(session_tokens),
                                "max": max(session_tokens),
                                "total": sum(session_tokens)},
        "sessions_over_window": over,
        "share_of_sessions_truncated_if_embedded_whole": round(over / len(seen), 4),
        "share_of_user_tokens_beyond_window_if_embedded_whole": round(
            sum(max(0, n - limit) for n in session_tokens) / sum(session_tokens), 4),
        "user_turns": turns, "turns_split_into_windows": split_turns,
        "word_windows": windows, "pieces_after_token_check": pieces,
        "windows_halved_to_fit_tokens": pieces - windows,
    }
    exclusive_write(args.output, json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
