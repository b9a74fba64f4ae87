"""``engram-eval production ...``: options generated from the settings fields, help text,
one clear error on bad input, the benchmark wrappers' old arguments, store and search."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from engram_eval.cli import production as CP
from engram_eval.production.settings import DEFAULT_CALIBRATION, ProductionSettings

REPO = Path(__file__).resolve().parents[2]
SUBCOMMANDS = ("store", "search", "run", "calibrate", "sweep", "calibrate-sessions", "measure")
SEARCHING = SUBCOMMANDS  # every one builds an engine, so every one takes the settings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="test")
    CP.add_subcommands(p.add_subparsers(dest="production_command", required=True))
    return p


def _sub(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _settable() -> list:
    return [f for f in fields(ProductionSettings)
            if f.metadata["cli"] and f.metadata["group"] != "runtime"]


@pytest.mark.parametrize("name", SEARCHING)
def test_every_settings_field_is_an_option(name: str) -> None:
    """One option per CLI-settable field (runtime fields excepted), named after it, storing
    into it, default None (only an explicit value overrides), help = the field's help and
    default; nothing else is generated."""
    opts = {a.dest: a for a in _sub(name)._actions}
    for f in _settable():
        a = opts.get(f.name)
        assert a is not None, f"{name}: no option for field {f.name}"
        assert f"--{f.name.replace('_', '-')}" in a.option_strings
        assert a.default is None
        if not f.metadata.get("hidden"):
            assert f.metadata["help"] in a.help and repr(f.default) in a.help
        if f.metadata["choices"]:
            assert list(a.choices) == list(f.metadata["choices"])
    for runtime in ("batch_size", "use_cache"):
        assert runtime not in opts


def test_options_build_the_settings() -> None:
    """Options override the package defaults, and a --settings record (named at the data
    file's place before the move, as published commands name it) before them."""
    args = _parser().parse_args(["run", "--fixture", "f", "--source-root", ".",
                                 "--min-confidence", "0.3", "--excerpt-retry",
                                 "--no-rerank", "--limit", "7", "--cutoff", "fixed"])
    s = CP.settings_from(args)
    assert (s.min_confidence, s.excerpt_retry, s.rerank, s.limit, s.cutoff) == (
        0.3, True, False, 7, "fixed")
    assert s.replace(min_confidence=0.6, excerpt_retry=False, rerank=True, limit=3,
                     cutoff="calibrated") == ProductionSettings()
    old = _parser().parse_args(["run", "--fixture", "f", "--source-root", ".", "--settings",
                                "engram_eval/production/settings_v1.json", "--limit", "5"])
    new = _parser().parse_args(["run", "--fixture", "f", "--source-root", ".", "--settings",
                                "engram_eval/production/data/settings_v1.json"])
    s_old, s_new = CP.settings_from(old), CP.settings_from(new)
    assert s_old == s_new.replace(limit=5)
    assert s_new.calibration == "engram_eval/production/calibration_v1.json"  # as recorded


def test_recorded_package_paths_resolve_after_the_move() -> None:
    from engram_eval.production.search import Engine
    from engram_eval.production.settings import data_file

    for name in ("calibration_v1.json", "calibration_v2.json", "settings_v1.json",
                 "calibration_v3_chat_full.json", "settings_v3_people.json"):
        moved = REPO / "engram_eval" / "production" / "data" / name
        assert data_file(f"engram_eval/production/{name}") == moved
        assert data_file(f"engram_eval/production/data/{name}") == moved
    assert data_file(DEFAULT_CALIBRATION).is_file()
    assert data_file("/abs/elsewhere.json") == Path("/abs/elsewhere.json")
    eng = Engine.__new__(Engine)
    eng.settings = ProductionSettings(calibration="engram_eval/production/calibration_v1.json")
    assert eng.calibration_path().is_file()


def test_help_lists_the_subcommands_and_the_defaults() -> None:
    r = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "production", "--help"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0
    for name in SUBCOMMANDS:
        assert name in r.stdout
    text = _sub("run").format_help()
    assert "--min-confidence" in text and "(default: 0.6)" in " ".join(text.split())
    assert "gate" in text and "--settings RECORD" in text
    cal = " ".join(_sub("calibrate").format_help().split())
    assert DEFAULT_CALIBRATION in cal and "calibration_v1.json" not in cal.split("--calibration")[-1]


def _cli(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "production", *argv],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("argv, expect", [
    (["run", "--fixture", "fixtures/production/dev.json", "--source-root", ".",
      "--validate-only", "--min-confidence", "2"], "min_confidence"),
    (["run", "--fixture", "fixtures/production/dev.json", "--source-root", ".",
      "--validate-only", "--settings", "/nonexistent/settings.json"], "/nonexistent"),
    (["store", "x.sqlite", "--memories", "MEMS"], "memory 1"),
])
def test_bad_input_is_one_clear_error(tmp_path: Path, argv: list[str], expect: str) -> None:
    mems = tmp_path / "mems.json"
    mems.write_text(json.dumps([{"id": "a", "text": "t"}, {"id": 3, "text": "u"}]))
    argv = [str(mems) if a == "MEMS" else str(tmp_path / a) if a == "x.sqlite" else a
            for a in argv]
    r = _cli(*argv)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and expect in lines[0], r.stderr
    assert not (tmp_path / "x.sqlite").exists()


def test_bad_option_value_is_a_usage_error() -> None:
    r = _cli("run", "--fixture", "f", "--source-root", ".", "--limit", "many")
    assert r.returncode == 2 and "--limit" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("script, argv", [
    ("run.py", ["--fixture", "fixtures/production/dev.json", "--source-root", ".",
                "--validate-only", "--settings", "engram_eval/production/settings_v1.json"]),
    ("calibrate.py", ["--fixture", "F", "--output", "O", "--report", "R", "--settings",
                      "engram_eval/production/settings_v1.json", "--l2", "0.001",
                      "--embedding-model", "all-MiniLM-L6-v2"]),
    ("abstention_sweep.py", ["D", "--dataset-label", "L", "--output", "O",
                             "--max-questions", "3", "--cache-dir", "C", "--no-cache",
                             "--rerank", "--reranker-model", "M", "--calibration", "K",
                             "--limit", "3", "--min-confidence", "0.6"]),
    ("confidence.py", ["fit", "--part", "a=b", "--output", "O", "--settings-output", "S",
                       "--report", "R", "--every", "a=3", "--folds", "5", "--C", "1.0",
                       "--mapping", "platt", "--calibrate-on", "top",
                       "--target-precision", "0.9", "--min-returned", "20",
                       "--no-excerpt-retry", "--cache-dir", "C"]),
    ("confidence.py", ["measure", "P", "--source-root", ".", "--settings",
                       "engram_eval/production/settings_v3_chat_full.json", "--validate-only",
                       "--freeze-source", "M", "--bins", "15", "--resamples", "2000",
                       "--seed", "0", "--ledger", "L", "--dataset-label", "X"]),
])
def test_the_wrappers_take_their_old_arguments(script: str, argv: list[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each benchmark script parses the arguments it always took (those the published
    results record) into its subcommand and hands them on; nothing runs here."""
    seen: dict[str, argparse.Namespace] = {}
    monkeypatch.setattr(CP, "cmd_production", lambda args: seen.setdefault("args", args) and 0)
    sys.path.insert(0, str(REPO / "benchmarks" / "production_retrieval"))
    try:
        import importlib

        mod = importlib.import_module(script.removesuffix(".py"))
        assert mod.main(argv) == 0
    finally:
        sys.path.remove(str(REPO / "benchmarks" / "production_retrieval"))
    args = seen["args"]
    assert args.production_command == {"run.py": "run", "calibrate.py": "calibrate",
                                       "abstention_sweep.py": "sweep"}.get(
        script, {"fit": "calibrate-sessions", "measure": "measure"}.get(argv[0]))
    CP.settings_from(args)  # the settings they name build


def test_store_then_search(tmp_path: Path, tiny_embedding_model: str,
                           tiny_cross_encoder: str) -> None:
    mems = tmp_path / "mems.json"
    mems.write_text(json.dumps({"memories": [
        {"id": "a", "text": "I adopted a border collie puppy.", "date": "2024-03-02"},
        {"id": "b", "text": "My sister bought a cake.", "date": "2024-03-10"}]}))
    db = str(tmp_path / "m.sqlite")
    # the rerank with a calibration of versions 1-3: the confidence is the cross-encoder's
    # sigmoid (no calibration fitted for the tiny model)
    settings = ["--embedding-model", tiny_embedding_model, "--rerank", "--reranker-model",
                tiny_cross_encoder, "--reranker-backend", "onnx",
                "--calibration", "engram_eval/production/data/calibration_v2.json"]
    assert CP.main(["store", db, "--memories", str(mems), *settings]) == 0
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert CP.main(["search", db, "--query", "Which puppy?", "--now", "2024-05-01",
                        "--min-confidence", "0", "--limit", "1", "--trace", *settings]) == 0
    doc = json.loads(buf.getvalue())
    assert len(doc["results"]) == 1 and len(doc["candidates"]) == 2
    assert doc["question"]["min_confidence"] == 0.0
