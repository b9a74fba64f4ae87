"""Issue 43, "tracebacks and unclear errors": one clear line, and nothing written.

* ``run --reranker-model /etc`` (a directory that is not a model) and a directory with a
  ``config.json`` but no weights: one error naming the directory, before the output is
  claimed (no result, no sidecar: the output path stays free); ``--embedding-model`` alike.
* ``split --output-dir`` that is an existing file (was "[Errno 17] File exists"), under a
  file, a symbolic link to a directory (was: the parts written into its target) or a
  dangling one: one error naming it, nothing written anywhere (the link's target stays
  empty, no held-out part registered).
(A merge ``owner`` file that is a link: tests/runs/test_merge_data_loss.py.)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL

from engram_eval.cli import main as cli


def _tree(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (
                "link:" + os.readlink(p) if p.is_symlink() else "dir" if p.is_dir()
                else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    rc = cli.main(argv)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and "[Errno" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.mark.parametrize("option", ["--reranker-model", "--embedding-model"])
@pytest.mark.parametrize("kind", ["etc", "config-only"])
def test_a_directory_that_is_not_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         option: str, kind: str) -> None:
    if kind == "etc":
        model, says = "/etc", "/etc is not a model directory (no config.json or modules.json"
    else:
        d = tmp_path / "models" / "half"
        d.mkdir(parents=True)
        (d / "config.json").write_text('{"model_type": "bert"}\n')
        (d / "vocab.txt").write_text("[PAD]\n")
        model, says = str(d), f"{d} holds no weight file"
    work = tmp_path / "work"
    work.mkdir()
    out = work / "run.jsonl"
    argv = ["run", str(TINY_LONGMEMEVAL), "--no-progress", "--output", str(out), option, model]
    if option == "--reranker-model":
        argv.append("--rerank")
    else:
        argv += ["--retriever", "hybrid"]
    before = _tree(tmp_path)
    _one_line_error(argv, capsys, "engram-eval run: error:", says, "nothing was written")
    assert _tree(tmp_path) == before  # the output path stays unclaimed: no file, no sidecar
    assert sorted(work.iterdir()) == []


def _split(out_dir: Path) -> list[str]:
    return ["split", str(TINY_LONGMEMEVAL), "--holdout", "0.3", "--salt", "s",
            "--output-dir", str(out_dir)]


@pytest.mark.parametrize("kind", ["file", "under-a-file", "link", "dangling-link"])
def test_split_output_dir_that_is_not_a_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        _private_heldout_registry: Path, kind: str) -> None:
    target = tmp_path / "target"
    target.mkdir()
    plain = tmp_path / "plain.txt"
    plain.write_text("a file\n")
    if kind == "file":
        out_dir, says = plain, f"cannot use {plain} as an output directory: it is a file, not " \
            "a directory"
    elif kind == "under-a-file":
        out_dir, says = plain / "sub", f"{plain} is a file, not a directory"
    else:
        out_dir = tmp_path / "link"
        out_dir.symlink_to(target if kind == "link" else tmp_path / "nowhere",
                           target_is_directory=True)
        says = f"{out_dir}: is a symbolic link (to '{tmp_path / ('target' if kind == 'link' else 'nowhere')}'"
    before = _tree(tmp_path)
    _one_line_error(_split(out_dir), capsys, "engram-eval split: error:", says)
    assert _tree(tmp_path) == before
    assert list(target.iterdir()) == [] and not _private_heldout_registry.exists()


def test_split_into_a_real_directory_still_works(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "new" / "parts"
    assert cli.main(_split(out_dir)) == 0, capsys.readouterr().err
    assert (out_dir / "split_manifest.json").is_file()
