"""The command line: benchmark scripts, error messages, YAML config precedence, selections."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.provenance.sidecar import sidecar_path, summary_path

ROOT = Path(__file__).resolve().parents[2]
LME = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
LME_SCRIPT = ROOT / "benchmarks" / "longmemeval" / "run.py"
LOCOMO_SCRIPT = ROOT / "benchmarks" / "locomo" / "run.py"


def script(path: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(path), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def meta_of(out: Path) -> dict:
    return json.loads(sidecar_path(out).read_text(encoding="utf-8"))


def run_main(*args: str | Path) -> int:
    return cli.main(["run", *map(str, args), "--no-progress"])


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # cli.main sets these with os.environ.setdefault; keep them from leaking to other tests
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


# -- the LongMemEval script ------------------------------------------------------------------
def test_longmemeval_script_prints_four_labelled_tables(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    p = script(LME_SCRIPT, LME, "--retriever", "flat-bm25", "--output", out, "--no-progress",
               cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    meta = meta_of(out)
    assert f"fingerprint {meta['fingerprint']}" in p.stdout
    assert f"sha256 {meta['dataset']['sha256']}" in p.stdout
    heads = re.findall(r"^protocol=(\w+)  n=(\d+)  skipped=(\d+)$", p.stdout, re.M)
    assert heads == [("answerable", "10", "2"), ("official", "10", "2"),
                     ("official_nonempty_gold", "9", "3"), ("all", "12", "0")]
    denoms = re.findall(r"^  denominator: (.+)$", p.stdout, re.M)
    assert len(denoms) == 4
    assert "excluding _abs" in denoms[0] and "reference printer" in denoms[1]
    assert "no gold skipped" in denoms[2]
    assert "every question" in denoms[3]
    assert p.stdout.count("\noverall ") == 4
    assert "wrote 12 row(s)" in p.stdout
    assert meta["retriever"]["retriever"] == "flat-bm25"
    assert summary_path(out).is_file()


@pytest.mark.parametrize(("args", "needle"), [
    (["MISSING.json", "--retriever", "flat-bm25"], "MISSING.json"),
    ([LME, "--retriever", "flat-bm25", "--fusion-alpha", "2"], "fusion_alpha"),
    ([LME, "--retriever", "no-such-retriever"], "no-such-retriever"),
    ([LME, "--retriever", "flat-bm25", "--question-id", "lme_nope"], "lme_nope"),
    ([LME, "--retriever", "flat-bm25", "--limit", "0"], "limit"),
    ([LME, "--retriever", "flat-bm25", "--protocol", "locomo"], "protocols"),
])
def test_bad_input_is_one_error_line(tmp_path: Path, args: list, needle: str) -> None:
    out = tmp_path / "out.jsonl"
    p = script(LME_SCRIPT, *args, "--output", out, cwd=tmp_path)
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()
    assert len(err) == 1, p.stderr
    assert err[0].startswith("engram-eval run: error: ") and needle in err[0]
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing claimed


# -- YAML config ------------------------------------------------------------------------------
def test_yaml_config_applies_and_cli_zero_overrides(tmp_path: Path) -> None:
    yml = tmp_path / "run.yaml"
    yml.write_text("retriever: dummy\nrrf_k: 10\nbm25_b: 0.5\nuse_dense: false\n"
                   "use_dense_rocchio: false\n")  # Rocchio moves the dense question
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_main(LME, "--config", yml, "--output", a) == 0
    cfg = meta_of(a)["config"]
    assert (cfg["retriever"], cfg["rrf_k"], cfg["bm25_b"], cfg["use_dense"]) == \
        ("dummy", 10.0, 0.5, False)
    assert run_main(LME, "--config", yml, "--output", b, "--rrf-k", "0", "--bm25-b", "0",
                    "--use-dense") == 0
    cfg = meta_of(b)["config"]
    assert cfg["rrf_k"] == 0.0 and cfg["bm25_b"] == 0.0 and cfg["use_dense"] is True
    assert cfg["retriever"] == "dummy"  # untouched YAML value kept
    assert meta_of(a)["fingerprint"] != meta_of(b)["fingerprint"]


@pytest.mark.parametrize(("yaml_text", "needles"), [
    ("retriever: dummy\nrrf_kk: 10\n", ["unknown config field", "rrf_kk"]),
    ("retriever: dummy\nfusion_alpha: 1.5\n", ["fusion_alpha", "<= 1.0"]),
    ("retriever: dummy\nrerank_candidates: 0\n", ["rerank_candidates", ">= 1"]),
    ("retriever: dummy\nrrf_k: ten\n", ["rrf_k", "number"]),
    ("retriever: dummy\nconfidence_filter: true\n", ["confidence_filter"]),
    ("- not a mapping\n", ["mapping"]),
])
def test_bad_yaml_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              yaml_text: str, needles: list[str]) -> None:
    yml = tmp_path / "bad.yaml"
    yml.write_text(yaml_text)
    out = tmp_path / "out.jsonl"
    assert run_main(LME, "--config", yml, "--output", out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err
    for n in needles:
        assert n in err, err
    assert not out.exists() and not sidecar_path(out).exists()


def test_config_is_never_auto_loaded_from_cwd(tmp_path: Path) -> None:
    # Config-looking files in the working directory, one valid (would change the run) and
    # some invalid (would make it fail): all must be ignored.
    (tmp_path / "engram-eval.yaml").write_text("retriever: dummy\nrrf_k: 7\n")
    (tmp_path / "engram_eval.yaml").write_text("rrf_k: 7\n")
    (tmp_path / "config.yaml").write_text("not_a_field: 1\n")
    (tmp_path / ".engram-eval.yml").write_text("fusion_alpha: 5\n")
    out = tmp_path / "out.jsonl"
    p = script(LME_SCRIPT, LME, "--retriever", "flat-bm25", "--output", out, "--no-progress",
               cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    cfg = meta_of(out)["config"]
    from engram_eval.runs.config import RunConfig

    assert cfg["retriever"] == "flat-bm25" and cfg["rrf_k"] == 60.0
    assert cfg["fusion_alpha"] == RunConfig().fusion_alpha  # the default, not 5


# -- selections ---------------------------------------------------------------------------------
def test_selections_are_recorded_and_change_the_fingerprint(tmp_path: Path) -> None:
    full, lim, qid = tmp_path / "full.jsonl", tmp_path / "lim.jsonl", tmp_path / "qid.jsonl"
    assert run_main(LME, "--retriever", "dummy", "--output", full) == 0
    assert run_main(LME, "--retriever", "dummy", "--output", lim, "--limit", "3") == 0
    assert run_main(LME, "--retriever", "dummy", "--output", qid, "--question-id", "lme_t08",
                    "--question-id", "lme_t04") == 0
    m_full, m_lim, m_qid = meta_of(full), meta_of(lim), meta_of(qid)
    assert m_full["selection"]["limit"] is None and m_full["selection"]["n"] == 12
    assert m_lim["selection"] == {"question_ids": [], "limit": 3, "n": 3,
                                  "ids": ["lme_t01", "lme_t02", "lme_t03"]}
    assert m_qid["selection"] == {"question_ids": ["lme_t08", "lme_t04"], "limit": None, "n": 2,
                                  "ids": ["lme_t04", "lme_t08"]}  # file order
    assert m_lim["config"]["limit"] == 3 and m_qid["config"]["question_ids"] == ["lme_t08",
                                                                                "lme_t04"]
    assert len({m_full["fingerprint"], m_lim["fingerprint"], m_qid["fingerprint"]}) == 3
    assert [json.loads(x)["question_id"] for x in lim.read_text().splitlines()] == \
        m_lim["selection"]["ids"]
    s = json.loads(summary_path(qid).read_text(encoding="utf-8"))
    assert s["n_questions"] == 2 and s["protocols"]["all"]["n"] == 2
    # the same selection rows are identical to the full run's rows for those questions
    full_rows = {json.loads(x)["question_id"]: json.loads(x) for x in full.read_text().splitlines()}
    for line in qid.read_text().splitlines():
        r = json.loads(line)
        assert r["ranked_session_ids"] == full_rows[r["question_id"]]["ranked_session_ids"]


# -- LoCoMo -----------------------------------------------------------------------------------
def test_locomo_script_reports_the_locomo_protocols(tmp_path: Path) -> None:
    out = tmp_path / "loc.jsonl"
    p = script(LOCOMO_SCRIPT, LOCOMO, "--retriever", "flat-bm25", "--output", out,
               "--no-progress", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # locomo_tiny: 12 items, 2 without gold, 2 of category 5 (both with gold)
    assert re.findall(r"^protocol=(\w+)  n=(\d+)  skipped=(\d+)$", p.stdout, re.M) == \
        [("locomo", "10", "2"), ("locomo_no_adversarial", "8", "4")]
    meta = meta_of(out)
    assert meta["dataset_format"] == "locomo"
    assert meta["protocols"] == ["locomo", "locomo_no_adversarial"]
    assert meta["config"]["dataset_format"] == "locomo"
    s = json.loads(summary_path(out).read_text(encoding="utf-8"))
    assert list(s["protocols"]) == ["locomo", "locomo_no_adversarial"]
    assert set(s["protocols"]["locomo"]["by_type"]) == {"1", "2", "4", "5"}
    assert set(s["protocols"]["locomo_no_adversarial"]["by_type"]) == {"1", "2", "4"}


def test_locomo_with_dummy_autodetected(tmp_path: Path) -> None:
    out = tmp_path / "loc.jsonl"
    assert run_main(LOCOMO, "--retriever", "dummy", "--output", out) == 0
    meta = meta_of(out)
    assert meta["dataset_format"] == "locomo"
    assert meta["protocols"] == ["locomo", "locomo_no_adversarial"]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12
    assert all(set(r["metrics"]) == {"locomo", "locomo_no_adversarial"} for r in rows)
    assert sum(r["metrics"]["locomo"] is None for r in rows) == 2
    assert sum(r["metrics"]["locomo_no_adversarial"] is None for r in rows) == 4
