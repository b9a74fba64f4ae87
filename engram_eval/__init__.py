"""engram-eval: provenance-locked retrieval benchmarks for long-term conversational memory.

The Python face (imported lazily: ``import engram_eval`` loads none of the modules behind it)::

    questions = engram_eval.load_dataset("fixtures/longmemeval_tiny.json")
    out = engram_eval.run("fixtures/longmemeval_tiny.json", "x.jsonl", retriever="bm25")
    summary = engram_eval.score({"q1": ["s3", "s1"]}, "fixtures/longmemeval_tiny.json")
    finished = engram_eval.read_run("x.jsonl")

See README.md, "Python API".
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it (imported on first access, PEP 562)
_LAZY = {
    "load_dataset": "engram_eval.api",
    "make_retriever": "engram_eval.api",
    "run": "engram_eval.api",
    "RetrievalSettings": "engram_eval.retrieval.settings",
    "SystemSettings": "engram_eval.retrieval.settings",
    "score": "engram_eval.scoring.score",
    "read_run": "engram_eval.runs.reader",
    "FinishedRun": "engram_eval.runs.reader",
}

__all__ = ["FinishedRun", "RetrievalSettings", "SystemSettings", "__version__", "load_dataset",
           "make_retriever", "read_run", "run", "score"]

if TYPE_CHECKING:
    from engram_eval.api import load_dataset, make_retriever, run
    from engram_eval.retrieval.settings import RetrievalSettings, SystemSettings
    from engram_eval.runs.reader import FinishedRun, read_run
    from engram_eval.scoring.score import score


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
