"""Dataset records and loaders."""

from engram_eval.data.locomo import LocomoConversation, LocomoDataset, LocomoReport, load_locomo
from engram_eval.data.longmemeval import (
    LoadReport,
    LongMemEvalDataset,
    iter_longmemeval,
    load_longmemeval,
)
from engram_eval.data.records import Question, Session, Turn
from engram_eval.data.translations import apply_translations, load_question_translations

__all__ = [
    "LoadReport",
    "LocomoConversation",
    "LocomoDataset",
    "LocomoReport",
    "LongMemEvalDataset",
    "Question",
    "Session",
    "Turn",
    "apply_translations",
    "iter_longmemeval",
    "load_locomo",
    "load_longmemeval",
    "load_question_translations",
]
