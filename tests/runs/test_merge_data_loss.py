"""Issue 43, "data loss": a merge never removes a finished output.

* A temporary directory ``.OUT.merging`` holding a hard link to a finished output (its
  rows, sidecar or summary; put there by hand, or left by a merge killed inside its release
  step) is refused before any cleanup: every byte of the output and of the directory stays.
* A merge killed with SIGKILL inside its release step (a real process, killed after 0, 1
  and 2 of its temporary files were removed) leaves the finished output whole; the next
  merge into it is refused and changes nothing; the output verifies.
* A symbolic link in the temporary directory pointing at an output file is not that file:
  the output file stays.
* The ``owner`` file a symbolic link, a hard link (to a file taking the lock would empty) or
  a directory: one clear error naming it, nothing changed.
* The half-published state a merge killed inside its publish step leaves (sidecar and
  summary linked, rows not) is still cleaned by the next merge (tests/io covers the rest).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import merge, staging_dir
from engram_eval.runs.runner import run

TINY = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
N_SHARDS = 3


def _tree(root: Path) -> dict[str, tuple[str, str]]:
    """relative path -> (kind, sha256 / link target) of everything under ``root``."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _merge_cli(shards: list[Path], out: Path,
               capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = cli.main(["merge", *map(str, shards), "--output", str(out), "--dataset", str(TINY)])
    return rc, capsys.readouterr().err


def _one_line_error(rc: int, err: str, *needles: str) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("shards")
    outs = []
    for i in range(N_SHARDS):
        out = d / f"s{i}.jsonl"
        run(RunConfig(retriever="dummy", progress=False, shard=f"{i}/{N_SHARDS}"), TINY, out,
            echo=lambda m: None)
        outs.append(out)
    return outs


@pytest.fixture()
def finished(shards: list[Path], tmp_path: Path) -> Path:
    """A finished merge (rows, sidecar, summary) alone in its own directory."""
    out = tmp_path / "merged" / "m.jsonl"
    merge(shards, out, dataset=TINY, echo=lambda m: None)
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "m.jsonl", "m.jsonl.metadata.json", "m.jsonl.summary.json"]
    return out


def _finals(out: Path) -> dict[str, Path]:
    return {"rows": out, "metadata.json": sidecar_path(out), "summary.json": summary_path(out)}


@pytest.mark.parametrize("linked", [("rows",), ("metadata.json",), ("summary.json",),
                                    ("metadata.json", "summary.json"),
                                    ("rows", "metadata.json", "summary.json")])
def test_hard_link_to_a_finished_output_in_the_staging_directory(
        finished: Path, shards: list[Path], capsys: pytest.CaptureFixture[str],
        linked: tuple[str, ...]) -> None:
    stage = staging_dir(finished)
    stage.mkdir()
    (stage / "owner").write_text("pid 4206649 on somehost\n")  # a dead merge's, unlocked
    (stage / ".rows.abc.tmp").write_bytes(b'{"question_id": "lme_t0')
    for name in linked:
        os.link(_finals(finished)[name], stage / name)
    before = _tree(finished.parent)
    rc, err = _merge_cli(shards, finished, capsys)
    _one_line_error(rc, err, "already exists", "nothing was changed", str(stage))
    assert "partly published" not in err and "removed" not in err
    assert _tree(finished.parent) == before  # every byte of the output, and the directory


@pytest.mark.parametrize("removed", [0, 1, 2])
def test_merge_killed_inside_its_release_step_keeps_the_finished_output(
        shards: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        removed: int) -> None:
    """A real merge process, killed with SIGKILL in its release step after ``removed`` of
    its three temporary files are gone (the others are hard links to the finished output)."""
    out = tmp_path / "merged" / "m.jsonl"
    ready = tmp_path / "ready"
    script = KILLED_IN_RELEASE
    proc = subprocess.Popen([sys.executable, "-c", script, str(ready), str(removed), str(out),
                             str(TINY), *map(str, shards)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300  # a limit on waiting, not a measured threshold
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    stage = staging_dir(out)
    left = sorted(p.name for p in stage.iterdir())
    assert "owner" in left and len(left) == 1 + 3 - removed, left
    assert all(os.path.samefile(stage / n, _finals(out)[n]) for n in left if n != "owner")
    before = _tree(out.parent)
    rc, err = _merge_cli(shards, out, capsys)
    _one_line_error(rc, err, f"{out} already exists", "nothing was changed")
    assert _tree(out.parent) == before
    rc = cli.main(["verify", str(out), "--dataset", str(TINY)])
    cap = capsys.readouterr()
    assert rc == 0, cap.out + cap.err


KILLED_IN_RELEASE = r"""
import sys, time
from pathlib import Path
import engram_eval.runs.merge as M

ready, after, out, dataset, *shards = sys.argv[1:]
after = int(after)
published = [False]
real_publish, real_remove = M.Staging.publish, M.remove_contained
count = [0]

def publish(self):
    real_publish(self)
    published[0] = True

def remove(path, root, **kw):
    if published[0]:
        if count[0] == after:  # inside release: say so, then wait to be killed
            Path(ready).write_text("ready")
            time.sleep(600)
        count[0] += 1
    return real_remove(path, root, **kw)

M.Staging.publish, M.remove_contained = publish, remove
M.merge(shards, out, dataset=dataset)
"""


def test_a_symbolic_link_in_the_staging_directory_is_not_the_output(
        finished: Path, shards: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The rows gone, the sidecar and summary finished: links to them in the temporary
    directory do not make them half-published; they are refused, not removed."""
    finished.unlink()
    stage = staging_dir(finished)
    stage.mkdir()
    (stage / "owner").write_text("")
    for name in ("metadata.json", "summary.json"):
        (stage / name).symlink_to(_finals(finished)[name])
    before = _tree(finished.parent)
    rc, err = _merge_cli(shards, finished, capsys)
    _one_line_error(rc, err, f"{sidecar_path(finished)} already exists")
    assert _tree(finished.parent) == before


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "directory"])
def test_owner_file_that_is_a_link(shards: list[Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str], kind: str) -> None:
    out = tmp_path / "merged" / "m.jsonl"
    stage = staging_dir(out)
    stage.mkdir(parents=True)
    precious = tmp_path / "merged" / "precious.txt"
    precious.write_text("every byte of this stays\n")
    owner = stage / "owner"
    if kind == "symlink":
        owner.symlink_to(precious)
    elif kind == "hardlink":
        os.link(precious, owner)
    else:
        owner.mkdir()
    (stage / ".rows.abc.tmp").write_bytes(b"{")
    before = _tree(tmp_path)
    rc, err = _merge_cli(shards, out, capsys)
    says = {"symlink": "is a symbolic link", "hardlink": "is a hard link (2 names of one file)",
            "directory": "is a directory"}[kind]
    _one_line_error(rc, err, f"{owner}: the merge's owner file {says}", "nothing was changed")
    assert "file system" not in err
    assert _tree(tmp_path) == before
    assert precious.read_text() == "every byte of this stays\n"


def test_half_published_merge_is_still_cleaned(
        shards: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a merge killed between linking the sidecar and the rows leaves is removed by the
    next merge, which then writes the whole output."""
    out = tmp_path / "merged" / "m.jsonl"
    stage = staging_dir(out)
    stage.mkdir(parents=True)
    (stage / "owner").write_text("pid 4206649 on somehost\n")
    for name in ("metadata.json", "summary.json"):
        (stage / name).write_text("{}\n")
        os.link(stage / name, _finals(out)[name])
    rc, err = _merge_cli(shards, out, capsys)
    assert rc == 0, err
    assert "partly published" in err and not stage.exists()
    assert sidecar_path(out).read_text() != "{}\n" and out.stat().st_size > 0
