"""Gzip-compressed result files (``x.jsonl.gz``), ``engram-eval compress``, the rows hash,
and the run-order / progress / LoCoMo-date / temporal-count items of the runner split."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig
from engram_eval.runs.export import compress_result, export_official_log, export_public
from engram_eval.runs.progress import Progress
from engram_eval.runs.rows import rows_sha256, scan_rows
from engram_eval.runs.verify import verify
from engram_eval.scoring.score import score_rankings
from engram_eval.scoring.summary import format_summary, summarize_rows

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)


def test_rows_hash_is_recorded_in_summary_and_sidecar(result: Path) -> None:
    import hashlib

    digest = hashlib.sha256(result.read_bytes()).hexdigest()
    assert json.loads(summary_path(result).read_text())["rows_sha256"] == digest
    runs = json.loads(sidecar_path(result).read_text())["runs"]
    assert runs[-1]["rows_sha256"] == digest == rows_sha256(result)


def test_compress_writes_a_deterministic_verified_gz_and_removes_the_plain_files(
        result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = result.read_bytes()
    side, summ = sidecar_path(result).read_bytes(), summary_path(result).read_bytes()
    assert cli.main(["compress", str(result)]) == 0
    gz = Path(str(result) + ".gz")
    assert "wrote" in capsys.readouterr().out
    assert not result.exists() and not sidecar_path(result).exists()
    assert not summary_path(result).exists()
    data = gz.read_bytes()
    assert data == gzip.compress(plain, compresslevel=9, mtime=0)  # deterministic, mtime 0
    assert gzip.decompress(data) == plain
    assert Path(str(gz) + ".metadata.json").read_bytes() == side
    assert Path(str(gz) + ".summary.json").read_bytes() == summ
    assert rows_sha256(gz) == rows_sha256_of_bytes(plain)
    rep = verify(gz, FIXTURE)
    assert rep.verified, rep.format()
    # every reader accepts the .gz
    assert len(scan_rows(gz).rows) == 12
    assert export_public(gz, gz.parent / "pub.jsonl") == 12
    assert export_official_log(gz, gz.parent / "off.jsonl", FIXTURE) == 12
    assert cli.main(["verify", str(gz), "--dataset", str(FIXTURE)]) == 0
    summary, _ = score_rankings(_gzip_copy(gz.parent / "pub.jsonl"), FIXTURE)
    assert summary["protocols"] == json.loads(summ)["protocols"]


def rows_sha256_of_bytes(b: bytes) -> str:
    import hashlib

    return hashlib.sha256(b).hexdigest()


def _gzip_copy(path: Path) -> Path:
    out = Path(str(path) + ".gz")
    out.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    return out


def test_compress_refuses_an_unverifiable_result_and_keeps_it(result: Path) -> None:
    lines = result.read_bytes().splitlines(keepends=True)
    result.write_bytes(b"".join(lines[:-1]))
    with pytest.raises(ProvenanceError, match="does not verify"):
        compress_result(result)
    assert result.exists() and not Path(str(result) + ".gz").exists()


def test_compress_refuses_to_overwrite(result: Path) -> None:
    Path(str(result) + ".gz").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        compress_result(result)
    assert result.exists() and Path(str(result) + ".gz").read_bytes() == b"x"


def test_resume_on_a_gz_is_refused(result: Path, tmp_path: Path) -> None:
    compress_result(result)
    gz = Path(str(result) + ".gz")
    with pytest.raises(ProvenanceError, match="compressed result is final"):
        runner.run(RunConfig(retriever="flat-bm25", progress=False), FIXTURE, gz,
                   resume=True, echo=lambda m: None)
    with pytest.raises(ConfigError, match="compress"):
        runner.run(RunConfig(retriever="flat-bm25", progress=False), FIXTURE,
                   tmp_path / "new.jsonl.gz", echo=lambda m: None)


# -- the retriever is built before the dataset is parsed -------------------------------------
def _broken_dataset(tmp_path: Path) -> Path:
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    raw[3]["haystack_dates"] = "not a list"
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_bad_retriever_name_fails_before_the_dataset_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown retriever 'nope'"):
        runner.run(RunConfig(retriever="nope", progress=False), _broken_dataset(tmp_path),
                   tmp_path / "out.jsonl", echo=lambda m: None)
    assert not (tmp_path / "out.jsonl").exists()


def test_missing_reranker_fails_before_the_dataset_is_parsed(tmp_path: Path) -> None:
    from engram_eval.errors import EngramEvalError

    cfg = RunConfig(retriever="hybrid", rerank=True,
                    reranker_model=str(tmp_path / "no-such-model"), progress=False)
    with pytest.raises(EngramEvalError) as info:
        runner.run(cfg, _broken_dataset(tmp_path), tmp_path / "out.jsonl",
                   echo=lambda m: None)
    assert "haystack_dates" not in str(info.value)
    assert not (tmp_path / "out.jsonl").exists()


# -- progress --------------------------------------------------------------------------------
def test_progress_in_a_log_is_a_line_every_five_percent() -> None:
    buf = io.StringIO()  # not a terminal
    with Progress(40, 0, stream=buf) as p:
        for _ in range(40):
            p.update(1)
    text = buf.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 20  # 40 questions, a line every 5% (2 questions)
    assert lines[0].startswith("questions: 2/40 (5%)")
    assert lines[-1].startswith("questions: 40/40 (100%)")


@pytest.mark.parametrize("total", [277, 397, 1986])
def test_progress_never_repeats_a_percentage(total: int) -> None:
    # 277 * 5% = 13.85: rounding once gave both 55/277 and 56/277 as "(20%)".
    buf = io.StringIO()
    with Progress(total, 0, stream=buf) as p:
        for _ in range(total):
            p.update(1)
    pcts = [line.split("(")[1].split("%")[0] for line in buf.getvalue().splitlines()]
    assert len(pcts) == len(set(pcts)) == 20


def test_progress_resumed_and_small_totals() -> None:
    buf = io.StringIO()
    with Progress(7, 3, stream=buf) as p:
        for _ in range(4):
            p.update(1)
    counts = [line.split()[1] for line in buf.getvalue().splitlines()]
    assert counts == ["4/7", "5/7", "6/7", "7/7"]  # every step is over 5% of 7
    quiet = io.StringIO()
    with Progress(7, 0, stream=quiet, enabled=False) as p:
        p.update(7)
    assert quiet.getvalue() == ""


def test_progress_on_a_terminal_is_a_bar() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    buf = Tty()
    with Progress(10, 0, stream=buf) as p:
        p.update(10)
    assert "\r" in buf.getvalue() and "10/10" in buf.getvalue()


# -- temporal status counts and LoCoMo dates ---------------------------------------------------
def test_summary_counts_temporal_status_per_question(pristine: Path) -> None:
    rows = scan_rows(pristine).rows
    statuses = ["window", "no_expression", "parse_failed"]
    for i, r in enumerate(rows):
        r["trace"]["question"]["temporal_status"] = statuses[i % 3]
    s = summarize_rows(rows, ["answerable"])
    assert s["temporal_windows"] == {"no_expression": 4, "parse_failed": 4, "window": 4}
    assert "temporal windows: no_expression=4" in format_summary(s)
    plain = summarize_rows(scan_rows(pristine).rows, ["answerable"])
    assert "temporal_windows" not in plain


def test_locomo_questions_carry_no_invented_date() -> None:
    from engram_eval.data.locomo import load_locomo

    ds = load_locomo(ROOT / "fixtures" / "locomo_tiny.json")
    for q in ds.questions:
        assert q.question_date == ""
        assert q.get_extra("last_session_date") == q.sessions[-1].date
