"""``engram_eval.analysis.provenance_table`` (run by ``scripts/provenance_table.py``): every
published result with its recorded command, fingerprint and hashes, read from the sidecars."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from run_files import copy_run

from engram_eval.analysis import provenance_table as P
from engram_eval.runs.export import compress_result

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "provenance_table.py"


def test_display_command_is_portable() -> None:
    assert P.display_command(["benchmarks/longmemeval/run.py", "d.json"]) == \
        ["python", "benchmarks/longmemeval/run.py", "d.json"]
    assert P.display_command(["/x/.venv/bin/engram-eval", "run", "/data/d.json",
                              "--cache-dir", "/home/me/cache", "--output", "out.jsonl"]) == \
        ["engram-eval", "run", "d.json", "--cache-dir", "CACHE_DIR", "--output", "out.jsonl"]


def test_one_entry_per_result_plain_or_compressed(pristine: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    (root / "a").mkdir(parents=True)
    plain = copy_run(pristine, root / "a" / "plain.jsonl")
    packed = compress_result(copy_run(pristine, root / "a" / "packed.jsonl"))
    # a context export's sidecar is a derived file's, not a run's: left out
    (root / "a" / "x.context.jsonl.gz.metadata.json").write_text('{"kind": "engram-eval/context"}')
    text = P.provenance_table(root)
    meta = json.loads(Path(str(plain) + ".metadata.json").read_text())
    summ = json.loads(Path(str(plain) + ".summary.json").read_text())
    entries = text.split("### ")[1:]
    assert [e.splitlines()[0] for e in entries] == [f"`{packed}`", f"`{plain}`"]  # sorted
    for e in entries:
        assert f"- fingerprint: `{meta['fingerprint']}`" in e
        assert f"- rows sha256 (uncompressed): `{summ['rows_sha256']}`" in e
        assert e.endswith(" --dataset DATA`\n\n")
    assert f"- then: `engram-eval compress {root}/a/packed.jsonl`" in entries[0]
    assert "- then:" not in entries[1]
    assert f"- retriever: `{meta['retriever']['retriever']}`; models: " in text
    assert "context" not in text


def test_the_recorded_script_prints_the_same_table(pristine: Path, tmp_path: Path) -> None:
    copy_run(pristine, tmp_path / "r.jsonl")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == P.provenance_table(tmp_path) and done.stdout.startswith("### ")
