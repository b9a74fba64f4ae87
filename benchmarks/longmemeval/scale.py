#!/usr/bin/env python
"""Scaling with haystack size on SYNTHETIC stress sets (``engram-eval make-stress``).

1. Stress sets at each ``--sizes`` (default 100, 250, 500 sessions per question) for the
   first ``--questions`` questions of DATA (fillers drawn from every question's haystack).
2. For each size and each retriever (``bm25``: BM25 only; ``hybrid``: the default), one run
   in a fresh subprocess with an empty vector cache: wall s/question, peak RSS, inference
   share, and recall at that size (answerable protocol). A least-squares line of
   s/question on sessions per retriever, with R^2 (cost linear in sessions when R^2 ~ 1).
3. Streaming: a larger stress file (``--stream-sessions``, every source question or
   ``--stream-questions``) is generated (peak RSS of the generator) and then read through
   the streaming loader (peak RSS of the reader), with its size in GiB; then a real
   ``engram-eval run --retriever bm25`` over that file (fresh subprocess, cold cache; the
   runner streams it: a validating first pass, then one question at a time) records wall
   s/question and peak RSS (``--stream-run-limit N`` ranks only the first N questions, the
   first pass still reads the whole file; ``--stream-trace-sessions``, default 10, is the
   run's ``--trace-sessions``; ``--skip-stream-run`` leaves the run out).
4. Local vs Ray (``--ray-workers``, default 2) wall time for the default retriever on the
   smallest size, each cold.

Not a test: it measures, never asserts. Outputs (atomic, refused when they exist): the
table JSON (``--output``, with a provenance header) and a labelled PNG (``--plot``).

    python benchmarks/longmemeval/scale.py DATA --output OUT.json --plot OUT.png \\
        [--questions 12] [--sizes 100,250,500] [--seed 0] [--scratch DIR] \\
        [--stream-sessions 500] [--stream-questions N] [--skip-stream] [--skip-ray]
        [--stream-run-limit N] [--stream-trace-sessions 10] [--skip-stream-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import _scale_common as common

from engram_eval.retrieval.flags import ArgumentParser, output_file

STREAM_READER = """
def main(path):
    from engram_eval.data.longmemeval import iter_longmemeval
    n = s = 0
    for q in iter_longmemeval(path):
        n += 1
        s += len(q.sessions)
    return {"questions": n, "sessions": s}
"""
STREAM_WRITER = """
def main(src, out, sessions, seed, limit):
    from engram_eval.data.stress import make_stress
    m = make_stress(src, out, sessions=int(sessions), seed=int(seed),
                    limit=None if limit == "all" else int(limit))
    return {"n_questions": m["n_questions"], "bytes": m["output"]["size"]}
"""
RETRIEVERS = {"bm25": ["--retriever", "bm25"], "hybrid": ["--retriever", "hybrid"]}


def _fit(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    import numpy as np

    if len(xs) < 2:
        return None
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    slope, intercept = np.polyfit(x, y, 1)
    pred = slope * x + intercept
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return {"slope_s_per_session": float(slope), "intercept_s": float(intercept),
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0}


def _recall(out: Path) -> dict[str, Any]:
    summ = json.loads(Path(str(out) + ".summary.json").read_text())
    m = summ["protocols"]["answerable"]["metrics"]
    return {k: m.get(k) for k in ("recall_any@1", "recall_any@5", "recall_all@5",
                                  "ndcg_any@5", "recall_any@10")}


def _plot(table: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for name, rows in table["runs"].items():
        xs = [r["sessions"] for r in rows]
        axes[0].plot(xs, [r["seconds_per_question"] for r in rows], "o-", label=name)
        axes[1].plot(xs, [r["peak_rss_gib"] for r in rows], "o-", label=name)
        axes[2].plot(xs, [r["recall"]["recall_any@5"] for r in rows], "o-",
                     label=f"{name} recall_any@5")
        fit = table["fits"].get(name)
        if fit:
            axes[0].plot(xs, [fit["slope_s_per_session"] * x + fit["intercept_s"] for x in xs],
                         ":", color="grey")
            axes[0].annotate(f"{name} R²={fit['r2']:.4f}", (xs[-1], rows[-1]
                             ["seconds_per_question"]), fontsize=8)
    axes[0].set(xlabel="sessions per question", ylabel="wall s / question (cold)",
                title="cost vs haystack size")
    axes[1].set(xlabel="sessions per question", ylabel="peak RSS (GiB)",
                title="memory vs haystack size")
    axes[1].set_ylim(bottom=0)
    axes[2].set(xlabel="sessions per question", ylabel="answerable recall_any@5",
                title="quality vs haystack size")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"SYNTHETIC stress sets from {table['source']} "
                 f"({table['questions']} questions, seed {table['seed']}); this machine",
                 fontsize=10)
    fig.tight_layout()
    import io

    from engram_eval.io import atomic_write

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    atomic_write(path, buf.getvalue())  # a link at the plot path is refused


def main() -> int:
    ap = ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    ap.add_argument("--output", required=True, type=output_file, help="table JSON (must not exist)")
    ap.add_argument("--plot", type=output_file,
                    help="PNG plot (must not exist); default OUTPUT with .png")
    ap.add_argument("--questions", type=int, default=12, help="fixed subset: first N questions")
    ap.add_argument("--sizes", default="100,250,500")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scratch")
    ap.add_argument("--retrievers", default="bm25,hybrid")
    ap.add_argument("--stream-sessions", type=int, default=500)
    ap.add_argument("--stream-questions", help="questions in the streamed file (default all)")
    ap.add_argument("--skip-stream", action="store_true")
    ap.add_argument("--skip-stream-run", action="store_true",
                    help="measure the loader only, not a bm25 run over the streamed file")
    ap.add_argument("--stream-run-limit", type=int,
                    help="the streamed bm25 run ranks only the first N questions")
    ap.add_argument("--stream-trace-sessions", type=int, default=10,
                    help="--trace-sessions of the streamed bm25 run (0: all)")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--ray-workers", type=int, default=2)
    args, extra = ap.parse_known_args()
    plot = args.plot or str(Path(args.output).with_suffix(".png"))
    doc = common.claim(args.output, plot)
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [r for r in args.retrievers.split(",") if r]
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="engram-scale-"))
    scratch.mkdir(parents=True, exist_ok=True)
    from engram_eval.data.stress import make_stress

    table: dict[str, Any] = {"benchmark": "scale on synthetic stress sets",
                             "source": Path(args.dataset).name, "questions": args.questions,
                             "seed": args.seed, "sizes": sizes, "stress_sets": {},
                             "runs": {n: [] for n in names}, "fits": {}}
    for size in sizes:
        f = scratch / f"stress_{size}.json"
        if not f.exists():
            make_stress(args.dataset, f, sessions=size, seed=args.seed, limit=args.questions)
        table["stress_sets"][str(size)] = json.loads(Path(str(f) + ".meta.json").read_text())
        for name in names:
            tag = f"{name}-{size}"
            res = common.one_pass(tag, str(f), scratch, scratch / f"cache-{tag}",
                                  RETRIEVERS[name] + list(extra))
            res.update(sessions=size, recall=_recall(scratch / f"{tag}.jsonl"))
            table["runs"][name].append(res)
            print(json.dumps({tag: res["seconds_per_question"], "rss": res["peak_rss_gib"]}),
                  flush=True)
    for name in names:
        rows = table["runs"][name]
        table["fits"][name] = _fit([r["sessions"] for r in rows],
                                   [r["seconds_per_question"] for r in rows])
    if not args.skip_ray and "hybrid" in names:
        f = scratch / f"stress_{sizes[0]}.json"
        ray = common.one_pass(f"hybrid-{sizes[0]}-ray", str(f), scratch,
                              scratch / "cache-ray", RETRIEVERS["hybrid"] + list(extra) + [
                                  "--executor", "ray", "--ray-workers", str(args.ray_workers)])
        local = table["runs"]["hybrid"][0]
        table["local_vs_ray"] = {"sessions": sizes[0], "local_wall_seconds": local["wall_seconds"],
                                 "ray_wall_seconds": ray["wall_seconds"],
                                 "ray_workers": args.ray_workers,
                                 "ray_peak_rss_gib_driver": ray["peak_rss_gib"],
                                 "same_fingerprint": ray["fingerprint"] == local["fingerprint"]}
        print(json.dumps(table["local_vs_ray"]), flush=True)
    if not args.skip_stream:
        big = scratch / f"stream_{args.stream_sessions}.json"
        limit = args.stream_questions or "all"
        common.remove_file(big)  # a previous pass's, in the scratch directory
        common.remove_file(str(big) + ".meta.json")
        w = common.measure_python(STREAM_WRITER, [args.dataset, str(big),
                                                  str(args.stream_sessions), str(args.seed),
                                                  str(limit)])
        r = common.measure_python(STREAM_READER, [str(big)])
        table["streaming"] = {"file_gib": round(big.stat().st_size / 2**30, 3),
                              "sessions": args.stream_sessions, **w["result"],
                              "generate_wall_seconds": round(w["wall_seconds"], 1),
                              "generate_peak_rss_gib": round(w["peak_rss_bytes"] / 2**30, 3),
                              "read": r["result"],
                              "read_wall_seconds": round(r["wall_seconds"], 1),
                              "read_peak_rss_gib": round(r["peak_rss_bytes"] / 2**30, 3)}
        if not args.skip_stream_run:
            opts = RETRIEVERS["bm25"] + list(extra) + [
                "--trace-sessions", str(args.stream_trace_sessions)]
            if args.stream_run_limit:
                opts += ["--limit", str(args.stream_run_limit)]
            tag = f"bm25-stream-{args.stream_sessions}"
            res = common.one_pass(tag, str(big), scratch, scratch / f"cache-{tag}", opts)
            rows = scratch / f"{tag}.jsonl"
            res.update(rows_gib=round(rows.stat().st_size / 2**30, 4),
                       trace_sessions=args.stream_trace_sessions,
                       limit=args.stream_run_limit, recall=_recall(rows))
            table["streaming"]["run_bm25"] = res
        print(json.dumps(table["streaming"]), flush=True)
        common.remove_file(big)
    header = common.provenance_header(__file__, {"source": args.dataset},
                                      {"questions": args.questions, "sizes": sizes,
                                       "seed": args.seed, "retrievers": names,
                                       "run_options": extra,
                                       "stream_sessions": args.stream_sessions,
                                       "stream_questions": args.stream_questions,
                                       "stream_run": None if args.skip_stream_run else {
                                           "retriever": "bm25",
                                           "limit": args.stream_run_limit,
                                           "trace_sessions": args.stream_trace_sessions},
                                       "ray_workers": args.ray_workers})
    out = {**header, **table}
    doc.finish(out)
    _plot(table, plot)
    print(f"wrote {args.output} and {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
