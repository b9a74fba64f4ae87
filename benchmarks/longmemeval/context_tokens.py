#!/usr/bin/env python
"""A reader's context cost per question: token statistics of context exports
(``engram-eval export-context``) next to the oracle's (the question's gold answer sessions
in the same layout), overall and per question type.

Each export is read through :func:`engram_eval.qa.context.read_context` (sidecar fingerprint
and rows hash checked). Counts are the exports' own (the bundled MiniLM WordPiece tokenizer,
named in each sidecar); statistics: n, mean, median, p90 (nearest rank), min, max, total.
The output is refused when it exists; its sidecar (``<output>.metadata.json``) names the
exports with their sha256 and fingerprints.

    python benchmarks/longmemeval/context_tokens.py EXPORT [EXPORT ...] --output OUT.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engram_eval.io import dump_json, exclusive_write  # noqa: E402
from engram_eval.qa.context import read_context  # noqa: E402
from engram_eval.qa.tokens import token_stats  # noqa: E402
from engram_eval.retrieval.flags import ArgumentParser, output_file  # noqa: E402

GENERATOR = "benchmarks/longmemeval/context_tokens.py"


def statistics(exports: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {"unit": None, "exports": [], "by_k": {}, "oracle": None}
    oracle: dict[str, int] | None = None
    for path in exports:
        rows, meta, rows_sha = read_context(path)
        out["unit"] = out["unit"] or meta["tokenizer"]
        k = meta["top_k"]
        prompt = {r["question_id"]: r["tokens"]["prompt"] for r in rows}
        types = {r["question_id"]: r["question_type"] for r in rows}
        orc = {r["question_id"]: r["tokens"]["oracle_prompt"] for r in rows
               if r["tokens"]["oracle_sessions"]}
        if oracle is not None and orc != oracle:
            raise SystemExit(f"{path}: its oracle counts differ from the other exports'")
        oracle = orc
        out["exports"].append({"file": path.name, "top_k": k, "fingerprint": meta["fingerprint"],
                               "run_fingerprint": meta["run"]["fingerprint"],
                               "rows_sha256": rows_sha, "dataset": meta["dataset"]["name"],
                               "dataset_sha256": meta["dataset"]["sha256"]})
        per_type: dict[str, list[int]] = {}
        for q, n in prompt.items():
            per_type.setdefault(types[q], []).append(n)
        ratio = sorted(prompt[q] / orc[q] for q in orc)
        out["by_k"][str(k)] = {
            "prompt": token_stats(list(prompt.values())),
            "by_type": {t: token_stats(v) for t, v in sorted(per_type.items())},
            "median_ratio_to_oracle": round(ratio[len(ratio) // 2], 2) if ratio else None}
        out["types"] = types
    assert oracle is not None
    types = out.pop("types")
    per_type_o: dict[str, list[int]] = {}
    for q, n in oracle.items():
        per_type_o.setdefault(types[q], []).append(n)
    out["oracle"] = {"prompt": token_stats(list(oracle.values())),
                     "by_type": {t: token_stats(v) for t, v in sorted(per_type_o.items())},
                     "what": "the question's answer_session_ids in the same layout and prompt"}
    out["dataset"] = out["exports"][0]["dataset"]
    out["dataset_sha256"] = out["exports"][0]["dataset_sha256"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("exports", nargs="+", type=Path)
    ap.add_argument("--output", required=True, type=output_file)
    args = ap.parse_args(argv)
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.provenance.sidecar import sidecar_path

    for p in (Path(args.output), sidecar_path(args.output)):
        if p.exists():
            raise SystemExit(f"{p} already exists; refusing to overwrite")
    stats = statistics(args.exports)
    exclusive_write(args.output, dump_json(stats))
    write_derived_sidecar(args.output, generators=[GENERATOR, "engram_eval/qa/tokens.py"],
                          dataset={"name": stats["dataset"], "sha256": stats["dataset_sha256"]},
                          files=args.exports)
    for k, s in stats["by_k"].items():
        p = s["prompt"]
        print(f"k={k:>3}: median {p['median']} mean {p['mean']} p90 {p['p90']} max {p['max']}")
    o = stats["oracle"]["prompt"]
    print(f"oracle: median {o['median']} mean {o['mean']} p90 {o['p90']} max {o['max']}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
