#!/usr/bin/env python
"""Speed and memory benchmark of a retrieval run (not a test: it measures, never asserts).

Runs the same configuration twice in one process tree — cold (a new, empty embedding
cache) and warm (the cache the cold pass filled) — each in a fresh subprocess so peak RSS
is per pass. Reports wall time, questions per minute, peak RSS, model-inference seconds
and texts encoded, and the share of wall time outside model inference. Result rows go to
a scratch directory; the measurement JSON is written (exclusively) to ``--output``.

    python benchmarks/longmemeval/speed.py DATA --output results/x/speed.json [run options]
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engram_eval.retrieval.flags import ArgumentParser, output_file  # noqa: E402

#: Peak RSS of THIS process image, in bytes. On Linux ``VmHWM`` from /proc/self/status: the
#: high-water mark of the memory map created by exec. ``getrusage().ru_maxrss`` is not used
#: there because it survives fork + exec: a child started by a parent holding 0.7 GiB reports
#: at least 0.7 GiB whatever it uses itself. Elsewhere ru_maxrss (an upper bound), and the
#: result says which source was read.
PEAK_RSS = r"""
def _peak_rss():
    import resource, sys
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale, "ru_maxrss"
"""

CHILD = PEAK_RSS + r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from engram_eval.cli.main import main
t = time.perf_counter()
rc = main(sys.argv[3:])
wall = time.perf_counter() - t
rss, source = _peak_rss()
json.dump({"rc": rc, "wall_seconds": wall, "peak_rss_bytes": rss, "peak_rss_source": source},
          open(sys.argv[2], "w"))
"""


def one_pass(name: str, data: str, out_dir: Path, cache: Path, extra: list[str]) -> dict:
    out = out_dir / f"{name}.jsonl"
    meas = out_dir / f"{name}.measure.json"
    cmd = [sys.executable, "-c", CHILD, str(ROOT), str(meas), "run", data, "--output", str(out),
           "--cache-dir", str(cache), "--no-progress", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} pass failed:\n{proc.stderr[-3000:]}")
    m = json.loads(meas.read_text())
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    run = side["runs"][-1]
    n = side["selection"]["n"]
    model_s = sum(v.get("model_seconds", 0.0) for v in run["model_stats"].values())
    return {
        "pass": name, "questions": n, "wall_seconds": round(m["wall_seconds"], 2),
        "process_seconds": round(time.perf_counter() - t0, 2),
        "seconds_per_question": round(m["wall_seconds"] / n, 3),
        "questions_per_minute": round(60 * n / m["wall_seconds"], 2),
        "peak_rss_gib": round(m["peak_rss_bytes"] / 2**30, 3),
        "peak_rss_source": m.get("peak_rss_source", "ru_maxrss"),
        "model_inference_seconds": round(model_s, 2),
        "inference_share_of_wall": round(model_s / m["wall_seconds"], 3),
        "wall_over_inference": round(m["wall_seconds"] / model_s, 3) if model_s else None,
        "model_stats": run["model_stats"], "fingerprint": side["fingerprint"],
    }


def main() -> int:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("dataset")
    ap.add_argument("--output", required=True, type=output_file,
                    help="measurement JSON (must not exist)")
    ap.add_argument("--scratch", help="directory for scratch rows and the cold cache")
    args, extra = ap.parse_known_args()
    if Path(args.output).exists():
        raise SystemExit(f"{args.output} exists; refusing to overwrite")
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="engram-speed-"))
    scratch.mkdir(parents=True, exist_ok=True)
    cache = scratch / "cache"
    if cache.exists():
        raise SystemExit(f"{cache} exists; the cold pass needs an empty cache")
    cold = one_pass("cold", args.dataset, scratch, cache, extra)
    print(json.dumps(cold), flush=True)
    warm = one_pass("warm", args.dataset, scratch, cache, extra)
    print(json.dumps(warm), flush=True)
    from engram_eval.io import exclusive_write, sha256_file

    result = {
        "benchmark": "longmemeval retrieval speed",
        "dataset": os.path.basename(args.dataset), "dataset_sha256": sha256_file(args.dataset),
        "options": extra, "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                      "processor": platform.processor()},
        "cold": cold, "warm": warm,
        "warm_speedup": round(cold["wall_seconds"] / warm["wall_seconds"], 2),
        "same_fingerprint": cold["fingerprint"] == warm["fingerprint"],
        "rows_identical_apart_from_timing": _same_rows(scratch / "cold.jsonl", scratch / "warm.jsonl"),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    exclusive_write(args.output, json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("warm_speedup", "same_fingerprint",
                                             "rows_identical_apart_from_timing")}))
    return 0


def _same_rows(a: Path, b: Path) -> bool:
    from engram_eval.runs.rows import scan_rows, strip_measurements

    ra = [strip_measurements(r) for r in scan_rows(a).rows]
    rb = [strip_measurements(r) for r in scan_rows(b).rows]
    return ra == rb


if __name__ == "__main__":
    sys.exit(main())
