"""A system from outside the package runs, resumes, merges, verifies and re-executes like a
built-in retriever (by entry point and by py: path), and says what differs when its
installed version does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import systems_helpers as H

from engram_eval import api
from engram_eval.cli import main as cli
from engram_eval.errors import EngramEvalError
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import merge
from engram_eval.runs.runner import run
from engram_eval.runs.verify import verify

LEAK = "prefix-leak"


@pytest.fixture(autouse=True)
def _clean() -> None:
    H.SEEN.clear()
    H.FAIL_AT.clear()
    H.BAD.clear()


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


def _quiet(m: str) -> None:
    pass


def _recall_all_5(path: Path) -> float:
    return json.loads(summary_path(path).read_text())["protocols"]["answerable"]["metrics"][
        "recall_all@5"]


def test_entry_point_run_resume_verify_rerun(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    site = H.install(monkeypatch, tmp_path / "site")
    out = tmp_path / "leak.jsonl"
    cfg = tmp_path / "leak.json"
    cfg.write_text(json.dumps({"prefix": "answer_"}))
    argv = ["run", str(H.FIXTURE), "--retriever", LEAK, "--system-config", str(cfg),
            "--output", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    meta = json.loads(sidecar_path(out).read_text())
    system = meta["retriever"]["system"]
    assert (system["distribution"], system["version"]) == ("engram-prefix-leak", "1.0.0")
    assert system["settings"] == {"prefix": "answer_"}
    assert meta["config"]["system_settings"] == {"prefix": "answer_"}
    assert meta["retriever"]["ids"]["label"] == "opaque ids"
    summary = json.loads(summary_path(out).read_text())
    assert summary["system_ids"] == "opaque ids"
    assert set(summary["cost"]) == {"seconds"} and summary["cost"]["seconds"]["n"] == 12
    rep = verify(out, H.FIXTURE, rerun=3, rerun_seed=0)
    assert rep.ok and rep.verified, rep.format()
    # a resumed run: the last rows lost, then finished again with the same system
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:5]))
    assert cli.main([*argv, "--resume"]) == 0
    assert len(_rows(out)) == 12
    assert verify(out, H.FIXTURE).ok
    # another version installed: verify --rerun says exactly what differs, and refuses
    H.install(monkeypatch, site, version="1.1.0")
    (site / "engram_prefix_leak" / "__init__.py").write_text(
        (H.LEAK_SRC / "__init__.py").read_text().replace("PREFIX = ", "PREFIX: str = "))
    rep = verify(out, H.FIXTURE, rerun=2, rerun_seed=0)
    assert not rep.ok
    text = rep.format()
    assert "the system installed here is not the one the run used" in text
    assert "version: the run's '1.0.0', installed '1.1.0'" in text
    assert "engram_prefix_leak/__init__.py" in text
    # and a resume of the finished run with the other version is refused too
    with pytest.raises(EngramEvalError, match="version"):
        run(RunConfig(retriever=LEAK, system_settings={"prefix": "answer_"}, progress=False),
            H.FIXTURE, out, resume=True, echo=_quiet)


def test_py_path_opaque_vs_real_ids(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    name = "py:" + H.importable(monkeypatch, H.LEAK_SRC) + ":make_system"
    opaque, visible = tmp_path / "opaque.jsonl", tmp_path / "visible.jsonl"
    run(RunConfig(retriever=name, progress=False), H.FIXTURE, opaque, echo=_quiet)
    assert cli.main(["run", str(H.FIXTURE), "--retriever", name, "--real-ids",
                     "--output", str(visible), "--no-progress"]) == 0
    # the leak works only where the ids are visible; opaque ids leave it no prefix to read
    assert _recall_all_5(visible) == 1.0
    assert _recall_all_5(opaque) < 1.0
    meta = json.loads(sidecar_path(visible).read_text())
    assert meta["retriever"]["ids"] == {"real_ids": True, "id_salt": "", "id_seed": 0,
                                        "label": "ids visible"}
    assert json.loads(summary_path(visible).read_text())["system_ids"] == "ids visible"
    assert "engram_prefix_leak/__init__.py" in meta["retriever"]["system"]["files_sha256"]
    for path in (opaque, visible):
        rep = verify(path, H.FIXTURE, rerun=3, rerun_seed=1)
        assert rep.ok and rep.verified, rep.format()
    # a summary edited to hide the label, or to claim another cost, fails verify
    s = json.loads(summary_path(visible).read_text())
    s["system_ids"] = "opaque ids"
    s["cost"]["seconds"]["p50"] /= 2
    summary_path(visible).write_text(json.dumps(s))
    text = verify(visible, H.FIXTURE).format()
    assert "system_ids 'opaque ids' differs from the sidecar's 'ids visible'" in text
    assert "summary cost differs" in text
    # the Python API builds the same system as the runner
    import engram_eval

    r = engram_eval.make_retriever(name, system=engram_eval.SystemSettings(real_ids=True))
    q = engram_eval.load_dataset(H.FIXTURE)[0]
    r.index(q.sessions)
    assert r.rank(q).session_ids == _rows(visible)[0]["ranked_session_ids"]


def test_shards_merge_and_a_crash_resumes(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    name = "py:systems_helpers:make_spy"  # tests/ is on sys.path (pytest's pythonpath)
    cfg = RunConfig(retriever=name, progress=False, id_salt="salt", id_seed=3)
    outs = []
    for i in range(2):
        out = tmp_path / f"shard{i}.jsonl"
        api_out = api.run(H.FIXTURE, out, retriever=name, progress=False, id_salt="salt",
                          id_seed=3, shard=f"{i}/2", echo=_quiet)
        assert api_out.n_written > 0
        outs.append(out)
    merged = tmp_path / "merged.jsonl"
    merge(outs, merged, dataset=H.FIXTURE)
    rep = verify(merged, H.FIXTURE, rerun=4, rerun_seed=0)
    assert rep.ok and rep.verified, rep.format()
    # a crash mid-run (the system raises at its 5th question): rows so far kept, --resume ends
    H.SEEN.clear()
    H.FAIL_AT.append(5)
    crashed = tmp_path / "crashed.jsonl"
    with pytest.raises(EngramEvalError, match=r"search\(\) raised RuntimeError: the spy crashes"):
        run(cfg, H.FIXTURE, crashed, echo=_quiet)
    assert len(_rows(crashed)) == 4
    H.FAIL_AT.clear()
    run(cfg, H.FIXTURE, crashed, resume=True, echo=_quiet)
    whole = tmp_path / "whole.jsonl"
    run(cfg, H.FIXTURE, whole, echo=_quiet)
    strip = [{k: v for k, v in r.items() if k != "timing"} for r in _rows(crashed)]
    assert strip == [{k: v for k, v in r.items() if k != "timing"} for r in _rows(whole)]
    assert strip == [{k: v for k, v in r.items() if k != "timing"} for r in _rows(merged)]


def test_a_wrong_reply_stops_the_run_with_one_error_and_keeps_the_rows(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    name = "py:systems_helpers:make_spy"  # tests/ is on sys.path (pytest's pythonpath)
    H.BAD.append(lambda r: r[:3])
    out = tmp_path / "short.jsonl"
    assert cli.main(["run", str(H.FIXTURE), "--retriever", name, "--output", str(out),
                     "--no-progress"]) != 0
    assert out.read_text() == ""  # nothing scored from a short ranking
    assert sidecar_path(out).exists()


def test_system_config_yaml_and_bad_files(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    name = "py:" + H.importable(monkeypatch, H.LEAK_SRC) + ":make_system"
    good = tmp_path / "s.yaml"
    good.write_text("prefix: answer_\n")
    out = tmp_path / "y.jsonl"
    run(RunConfig(retriever=name, system_config=str(good), progress=False), H.FIXTURE, out,
        echo=_quiet)
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["retriever"]["system"]["settings"] == {"prefix": "answer_"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(EngramEvalError, match=f"{bad}.*mapping"):
        run(RunConfig(retriever=name, system_config=str(bad), progress=False), H.FIXTURE,
            tmp_path / "z.jsonl", echo=_quiet)
    assert not (tmp_path / "z.jsonl").exists()


def test_builtin_runs_record_no_system_fields(tmp_path: Path) -> None:
    out = tmp_path / "d.jsonl"
    run(RunConfig(retriever="dummy", progress=False), H.FIXTURE, out, echo=_quiet)
    meta = json.loads(sidecar_path(out).read_text())
    recorded = {**meta["config"], **meta["config_recorded"]}
    assert not {"real_ids", "id_salt", "system_settings", "system_url"} & set(recorded)
    assert "system_ids" not in json.loads(summary_path(out).read_text())
