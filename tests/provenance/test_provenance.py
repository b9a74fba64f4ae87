"""The provenance contract of a run: sidecar, summary, exclusive creation, resume checks.

Every run here uses the ``dummy`` retriever (no model) on ``fixtures/longmemeval_tiny.json``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.provenance import sidecar as provenance
from engram_eval.retrieval.dummy import DummyRetriever
from engram_eval.retrieval.models import resolve_model
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig
from engram_eval.runs.rows import strip_measurements

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
SCHEMA = ROOT / "engram_eval" / "schemas" / "sidecar.schema.json"
ALL_IDS = [q["question_id"] for q in json.loads(FIXTURE.read_text(encoding="utf-8"))]
TIMING = re.compile(rb', "timing": \{[^{}]*\}')


# -- helpers -------------------------------------------------------------------------------
def cfg(**kw: object) -> RunConfig:
    return RunConfig(retriever="dummy", progress=False, **kw)  # type: ignore[arg-type]


def do_run(out: Path, dataset: Path = FIXTURE, resume: bool = False, **kw: object):
    msgs: list[str] = []
    outcome = runner.run(cfg(**kw), dataset, out, resume=resume, echo=msgs.append)
    return outcome, msgs


def side(out: Path) -> Path:
    return provenance.sidecar_path(out)


def summ(out: Path) -> Path:
    return provenance.summary_path(out)


def load_json(p: Path):
    return json.loads(p.read_text(encoding="utf-8"))


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_bytes().splitlines()]


def snapshot(*paths: Path) -> dict[Path, tuple[bytes, int] | None]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) if p.exists() else None for p in paths}


def copy_fixture(tmp_path: Path) -> Path:
    data = tmp_path / "data" / FIXTURE.name
    data.parent.mkdir()
    shutil.copyfile(FIXTURE, data)
    return data


def assert_same_rows_except_timing(a: Path, b: Path) -> None:
    la, lb = a.read_bytes().splitlines(), b.read_bytes().splitlines()
    assert len(la) == len(lb) == len(ALL_IDS)
    for x, y in zip(la, lb, strict=True):
        assert TIMING.sub(b"", x) == TIMING.sub(b"", y)  # byte for byte, timing removed
        assert strip_measurements(json.loads(x)) == strip_measurements(json.loads(y))


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    """An uninterrupted run to compare resumed runs against."""
    out = tmp_path / "ref" / "out.jsonl"
    do_run(out)
    return out


# -- a fresh run ---------------------------------------------------------------------------
def test_fresh_run_writes_result_sidecar_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    outcome, _ = do_run(out)
    assert outcome.n_written == outcome.n_total == 12
    rows = rows_of(out)
    assert [r["question_id"] for r in rows] == ALL_IDS
    assert out.read_bytes().endswith(b"\n")

    meta = load_json(side(out))
    jsonschema.validate(meta, json.loads(SCHEMA.read_text(encoding="utf-8")))
    provenance.validate_sidecar(meta, side(out))
    assert meta["fingerprint"] == provenance.fingerprint_of(meta) == outcome.fingerprint
    assert meta["confidence_filter"] is False and meta["config"]["confidence_filter"] is False
    assert meta["selection"] == {"question_ids": [], "limit": None, "n": 12, "ids": ALL_IDS}
    assert "engram_eval/retrieval/dummy.py" in meta["sources"]
    assert "engram_eval/scoring/metrics.py" in meta["sources"]
    assert meta["dataset"]["sha256"] == runner.sha256_file(FIXTURE)
    assert [r["mode"] for r in meta["runs"]] == ["fresh"]

    s = load_json(summ(out))
    assert s["fingerprint"] == meta["fingerprint"]
    assert set(s["protocols"]) == {"answerable", "official", "official_nonempty_gold", "all"}
    # official keeps the no-gold non-_abs question (reference printer); the _nonempty_gold
    # view drops it
    expected_n = {"answerable": 10, "official": 10, "official_nonempty_gold": 9, "all": 12}
    for name, p in s["protocols"].items():
        assert p["n"] == expected_n[name]
        assert isinstance(p["metrics"], dict) and "recall_any@5" in p["metrics"]
        assert p["by_type"], name
        for t, bt in p["by_type"].items():
            assert isinstance(t, str)
            assert set(bt) >= {"n", "metrics"} and bt["n"] > 0
            assert "recall_all@10" in bt["metrics"]
        assert sum(bt["n"] for bt in p["by_type"].values()) == p["n"]
    # the summary is exactly what the rows say
    assert s["protocols"] == runner.summarize_rows(rows, list(expected_n))["protocols"]


@pytest.mark.parametrize("existing", ["result", "sidecar", "summary"])
def test_fresh_run_refuses_any_existing_file_and_touches_nothing(tmp_path: Path,
                                                                 existing: str) -> None:
    out = tmp_path / "out.jsonl"
    target = {"result": out, "sidecar": side(out), "summary": summ(out)}[existing]
    target.write_bytes(b'{"precious": true}\n')
    before = snapshot(out, side(out), summ(out))
    with pytest.raises(ProvenanceError) as e:
        do_run(out)
    msg = str(e.value)
    assert str(target) in msg and "refusing to overwrite" in msg and "--resume" in msg
    assert snapshot(out, side(out), summ(out)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no temp files left


def test_fresh_run_refusal_via_cli_exit_code(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.jsonl"
    side(out).write_text("{}\n")
    rc = cli.main(["run", str(FIXTURE), "--retriever", "dummy", "--no-progress",
                   "--output", str(out)])
    assert rc != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "error:" in err and str(side(out)) in err and "--resume" in err
    assert not out.exists()


def test_concurrent_fresh_runs_threads_exactly_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    n = 6
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = runner.run(cfg(), FIXTURE, out, echo=lambda m: None)
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    wins = [r for r in results if isinstance(r, runner.RunOutcome)]
    losses = [r for r in results if not isinstance(r, runner.RunOutcome)]
    assert len(wins) == 1, results
    for e in losses:
        assert isinstance(e, ProvenanceError), e
        assert "refusing to overwrite" in str(e) and "--resume" in str(e)
    assert [r["question_id"] for r in rows_of(out)] == ALL_IDS
    meta = load_json(side(out))
    assert len(meta["runs"]) == 1
    from engram_eval.runs.verify import verify

    assert verify(out, FIXTURE).ok


def test_concurrent_fresh_runs_processes_exactly_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "engram_eval.cli.main", "run", str(FIXTURE), "--retriever", "dummy",
           "--no-progress", "--output", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
             for _ in range(3)]
    done = [(p.wait(60), p.stderr.read().decode()) for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
    assert sorted(rc for rc, _ in done) == [0, 2, 2], done
    for rc, err in done:
        if rc:
            assert "refusing to overwrite" in err and "--resume" in err
    assert [r["question_id"] for r in rows_of(out)] == ALL_IDS


def test_concurrent_resumes_do_not_duplicate_rows(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    out.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:2]))
    real = DummyRetriever.rank
    monkeypatch.setattr(DummyRetriever, "rank", lambda self, q: (time.sleep(0.02), real(self, q))[1])
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            runner.run(cfg(), FIXTURE, out, resume=True, echo=lambda m: None)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(errors) <= 1
    assert [r["question_id"] for r in rows_of(out)] == ALL_IDS


# -- resume after a crash -------------------------------------------------------------------
def test_resume_after_sigkill_matches_uninterrupted_run(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "killed" / "out.jsonl"
    script = (
        "import sys, time\n"
        "from engram_eval.retrieval import dummy\n"
        "orig = dummy.DummyRetriever.rank\n"
        "def slow(self, q):\n"
        "    time.sleep(0.15)\n"
        "    return orig(self, q)\n"
        "dummy.DummyRetriever.rank = slow\n"
        "from engram_eval.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script, "run", str(FIXTURE), "--retriever",
                          "dummy", "--no-progress", "--output", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if out.exists() and out.read_bytes().count(b"\n") >= 3:
                break
            assert p.poll() is None, "the run finished before it could be killed"
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(30)
    assert p.returncode == -signal.SIGKILL
    n_before = out.read_bytes().count(b"\n")
    assert 3 <= n_before < 12
    assert not summ(out).exists()

    outcome, msgs = do_run(out, resume=True)
    assert outcome.n_written == 12 - n_before
    assert any(f"{n_before}/12" in m for m in msgs)
    assert_same_rows_except_timing(out, reference)
    assert outcome.fingerprint == load_json(side(reference))["fingerprint"]
    assert without_rows_hash(summ(out)) == without_rows_hash(summ(reference))
    assert [r["mode"] for r in load_json(side(out))["runs"]] == ["resume"]  # killed: no entry


def without_rows_hash(path: Path) -> dict:
    """A summary minus ``rows_sha256`` and ``cost`` (rows carry timings, so two runs hash
    differently and cost differently)."""
    s = load_json(path)
    assert len(s.pop("rows_sha256")) == 64
    assert s.pop("cost")["seconds"]["n"] == s["n_questions"]
    return s


def test_resume_repairs_torn_last_line_and_says_so(tmp_path: Path, reference: Path,
                                                   capsys) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    lines = out.read_bytes().splitlines(keepends=True)
    torn = lines[5][: len(lines[5]) // 2]
    out.write_bytes(b"".join(lines[:5]) + torn)  # a crash in the middle of row 6
    summ(out).unlink()
    rc = cli.main(["run", str(FIXTURE), "--retriever", "dummy", "--no-progress",
                   "--output", str(out), "--resume"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "repaired" in err and "torn" in err and f"({len(torn)} bytes)" in err
    assert "5/12" in err
    assert_same_rows_except_timing(out, reference)
    assert without_rows_hash(summ(out)) == without_rows_hash(summ(reference))
    runs = load_json(side(out))["runs"]
    assert runs[-1]["mode"] == "resume" and runs[-1]["repaired_torn_line"] is True
    assert runs[-1]["questions_written"] == 7


def test_resume_of_complete_run_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    before = out.read_bytes()
    outcome, _ = do_run(out, resume=True)
    assert outcome.n_written == 0 and not outcome.repaired_torn_line
    assert out.read_bytes() == before


def _corrupt_and_expect_refusal(out: Path, new_bytes: bytes, *needles: str) -> None:
    out.write_bytes(new_bytes)
    before = snapshot(out, side(out))
    with pytest.raises(ProvenanceError) as e:
        do_run(out, resume=True)
    for n in needles:
        assert n in str(e.value)
    assert snapshot(out, side(out)) == before


def test_resume_refuses_malformed_middle_row(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    lines = out.read_bytes().splitlines(keepends=True)[:6]
    lines[2] = lines[2][:40] + b"\n"
    _corrupt_and_expect_refusal(out, b"".join(lines), str(out), "line 3", "not valid JSON")


def test_resume_refuses_row_missing_a_field(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    lines = out.read_bytes().splitlines(keepends=True)[:6]
    row = json.loads(lines[1])
    del row["metrics"]
    lines[1] = json.dumps(row).encode() + b"\n"
    _corrupt_and_expect_refusal(out, b"".join(lines), "line 2", "'metrics'")


def test_resume_refuses_duplicate_row(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    lines = out.read_bytes().splitlines(keepends=True)[:5]
    _corrupt_and_expect_refusal(out, b"".join(lines) + lines[1], "line 6", "duplicate",
                                "lme_t02", "line 2")


def test_resume_refuses_row_outside_selection(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out, limit=4)
    extra = reference.read_bytes().splitlines(keepends=True)[5]  # lme_t06, not selected
    out.write_bytes(out.read_bytes() + extra)
    before = snapshot(out, side(out))
    with pytest.raises(ProvenanceError) as e:
        do_run(out, resume=True, limit=4)
    assert "line 5" in str(e.value) and "lme_t06" in str(e.value)
    assert "not in the run's selection" in str(e.value)
    assert snapshot(out, side(out)) == before


def test_resume_refuses_missing_sidecar(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    side(out).unlink()
    before = out.read_bytes()
    with pytest.raises(ProvenanceError) as e:
        do_run(out, resume=True)
    assert str(side(out)) in str(e.value) and "missing" in str(e.value)
    assert out.read_bytes() == before and not side(out).exists()


def test_resume_refuses_missing_result(tmp_path: Path) -> None:
    with pytest.raises(ProvenanceError, match="nothing to resume"):
        do_run(tmp_path / "never.jsonl", resume=True)


def test_resume_refuses_edited_sidecar_fingerprint(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    do_run(out)
    meta = load_json(side(out))
    meta["fingerprint"] = "0" * 64
    side(out).write_text(json.dumps(meta))
    with pytest.raises(ProvenanceError, match="fingerprint"):
        do_run(out, resume=True)


# -- resume refused when anything that defines the run changed -------------------------------
def _truncated_run(out: Path, dataset: Path = FIXTURE, **kw: object) -> dict:
    do_run(out, dataset, **kw)
    out.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:4]))
    return snapshot(out, side(out))


@pytest.mark.parametrize(("first", "second", "fields"), [
    ({"dummy_salt": ""}, {"dummy_salt": "x"}, ["config.dummy_salt", "retriever.salt"]),
    ({}, {"rrf_k": 0.0}, ["config.rrf_k"]),
    ({"limit": 6}, {"limit": 7}, ["config.limit", "selection.limit"]),
    ({}, {"limit": 6}, ["config.limit", "selection.limit"]),
    ({"question_ids": ["lme_t01", "lme_t02", "lme_t05"]}, {"question_ids": ["lme_t01", "lme_t02"]},
     ["config.question_ids", "selection.n"]),
    ({}, {"protocols": ["answerable"]}, ["protocols"]),
])
def test_resume_refuses_changed_setting(tmp_path: Path, first: dict, second: dict,
                                        fields: list[str]) -> None:
    out = tmp_path / "out.jsonl"
    before = _truncated_run(out, **first)
    with pytest.raises(ProvenanceError) as e:
        do_run(out, resume=True, **second)
    msg = str(e.value)
    assert "cannot resume" in msg
    for f in fields:
        assert f in msg, (f, msg)
    assert snapshot(out, side(out)) == before


def test_resume_ignores_non_defining_settings(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "out.jsonl"
    _truncated_run(out)
    outcome, _ = do_run(out, resume=True, batch_size=3, threads=0, use_cache=False)
    assert outcome.n_written == 8
    assert_same_rows_except_timing(out, reference)


def test_resume_refuses_changed_dataset_bytes(tmp_path: Path) -> None:
    data = copy_fixture(tmp_path)
    out = tmp_path / "out.jsonl"
    before = _truncated_run(out, data)
    data.write_bytes(data.read_bytes() + b"\n")  # same questions, different bytes
    with pytest.raises(ProvenanceError) as e:
        do_run(out, data, resume=True)
    assert "dataset.sha256" in str(e.value) and "dataset.size" in str(e.value)
    assert snapshot(out, side(out)) == before


def test_resume_refuses_changed_source_file(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out.jsonl"
    before = _truncated_run(out)
    real = provenance.sha256_file

    def fake(path, *a, **kw):
        h = real(path, *a, **kw)
        return "f" * 64 if Path(path).name == "dummy.py" else h

    monkeypatch.setattr(provenance, "sha256_file", fake)
    with pytest.raises(ProvenanceError) as e:
        do_run(out, resume=True)
    assert "sources.engram_eval/retrieval/dummy.py" in str(e.value)
    assert "sources.engram_eval/scoring/metrics.py" not in str(e.value)
    assert snapshot(out, side(out)) == before


def test_resume_refuses_changed_source_hashes(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out.jsonl"
    _truncated_run(out)
    real = provenance.source_hashes

    def fake(modules):
        h = real(modules)
        h["engram_eval/scoring/protocols.py"] = "0" * 64
        return h

    monkeypatch.setattr(provenance, "source_hashes", fake)
    with pytest.raises(ProvenanceError, match=r"sources\.engram_eval/scoring/protocols\.py"):
        do_run(out, resume=True)


def test_resume_refuses_changed_model_files(tmp_path: Path, monkeypatch) -> None:
    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}\n')
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    monkeypatch.setattr(DummyRetriever, "models",
                        lambda self: [resolve_model(str(model), "embedding")])
    out = tmp_path / "out.jsonl"
    before = _truncated_run(out)
    meta = load_json(side(out))
    assert meta["models"][0]["files_sha256"].keys() == {"config.json", "model.safetensors"}
    assert meta["models"][0]["path"] == str(model.resolve())

    (model / "config.json").write_text('{"hidden_size": 16, "changed": true}\n')
    with pytest.raises(ProvenanceError) as e:
        do_run(out, resume=True)
    msg = str(e.value)
    assert "models[0].files_sha256.config.json" in msg and "models[0].sha256" in msg
    assert "model.safetensors" not in msg
    assert snapshot(out, side(out)) == before


# -- static check ----------------------------------------------------------------------------
def _write_modes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, mode) of every open()/x.open() call whose mode string writes or truncates."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name not in ("open", "fdopen"):
            continue
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os" \
                and name == "open":
            continue  # os.open takes flags (checked by the O_EXCL test of claim_output)
        cands = [a for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        cands += [k.value for k in node.keywords
                  if k.arg == "mode" and isinstance(k.value, ast.Constant)]
        for c in cands:
            mode = c.value
            if re.fullmatch(r"[rwxabt+U]+", mode) and ("w" in mode or "x" in mode):
                found.append((node.lineno, mode))
    return found


def test_no_plain_write_open_in_package() -> None:
    allowed = {("engram_eval/io.py", "wb")}  # io._write_temp: os.fdopen of a mkstemp file
    bad = []
    for path in sorted((ROOT / "engram_eval").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, mode in _write_modes(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, mode) not in allowed:
                bad.append(f"{rel}:{line} open(..., {mode!r})")
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"\.write_(text|bytes)\(", text):
            bad.append(f"{rel}:{text[: m.start()].count(chr(10)) + 1} {m.group(0)}")
    assert not bad, "result/sidecar files must be written via io.exclusive_write/atomic_write " \
        "or appended to a claimed file:\n" + "\n".join(bad)
    # and the checker itself catches the forbidden forms
    assert _write_modes(ast.parse("open(p, 'w')\nPath(p).open(mode='wt')\nopen(p, 'ab')"))\
        == [(1, "w"), (2, "wt")]
