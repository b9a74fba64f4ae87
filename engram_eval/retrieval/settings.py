"""The retrieval settings: one frozen dataclass that validates itself on construction.

:class:`RetrievalSettings` holds every setting that can change a ranking of the retrievers
in :mod:`engram_eval.retrieval.hybrid` (plus the three runtime knobs they need: encoding
batch size and the embedding cache). It is what a library user builds a retriever from, and
:class:`engram_eval.runs.config.RunConfig` inherits it, so the run configuration's retrieval part,
its YAML keys and its CLI flags are these fields, with these names.

Validation runs in ``__post_init__`` (so ``RetrievalSettings(...)`` and
``dataclasses.replace(...)`` both validate): every field's type, allowed choices and range
(from the field's metadata) and the cross-field rules (``dense_piece_overlap <
dense_piece_words``). A bad value raises :class:`~engram_eval.errors.ConfigError` naming the
field.

Each field's metadata carries its help text, its CLI ``group`` (the pipeline stage: dense,
lexical, fusion, temporal, rerank, coverage, runtime), whether it is part of the run
fingerprint, and its bounds. ``describe()`` of a retriever is derived from these fields
(:func:`describe_settings`), never written by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from engram_eval.errors import ConfigError

#: Signals the hybrid retriever can compute, in trace/fusion order, with their use flag and
#: weight field.
SIGNALS: tuple[tuple[str, str, str], ...] = (
    ("dense", "use_dense", "weight_dense"),
    ("bm25_user", "use_bm25_user", "weight_bm25_user"),
    ("bm25_assistant", "use_bm25_assistant", "weight_bm25_assistant"),
    ("bm25_turn", "use_bm25_turn", "weight_bm25_turn"),
    ("bm25_prf", "use_bm25_prf", "weight_bm25_prf"),
    ("dense_rocchio", "use_dense_rocchio", "weight_dense_rocchio"),
)

#: Groups whose fields may differ by chat structure (``people_overrides``).
STRUCTURE_GROUPS = ("fusion", "temporal")
#: Rerank fields that may differ by chat structure too: whether a haystack is reranked, how
#: many candidates, and the blend (a reranker's card may choose them per structure).
STRUCTURE_RERANK_FIELDS = ("rerank", "rerank_candidates", "fusion_alpha", "rerank_turn_top_m")
#: Lexical fields that may differ by chat structure: the analyser, the speaker rule and BM25's
#: k1/b (which signals are computed stays one choice for every haystack).
STRUCTURE_LEXICAL_FIELDS = ("lexical_tokenizer", "lexical_stemmer", "lexical_stopwords",
                            "lexical_speaker", "bm25_k1", "bm25_b")
#: Turn-level aggregation fields that may differ by chat structure: how many of a session's
#: best turns its turn-level signals add up (a people's session holds both speakers' turns).
STRUCTURE_TURN_FIELDS = ("bm25_turn_top_m", "dense_turn_top_m")
#: Dense fields that may differ by chat structure: the encoder and how it runs (people's chats
#: are encoded by a model trained on them, :class:`~engram_eval.retrieval.holder.ModelHolder`
#: holding one encoder per structure; the piece rule stays one choice for every haystack).
STRUCTURE_DENSE_FIELDS = ("embedding_model", "embedding_backend", "embedding_precision")

#: The rerank fields a reranker's settings card chooses (the configuration the model was
#: measured with; :func:`apply_model_card`). A model without such a card gets, for each of
#: these not given explicitly, the generic cross-encoder rule below (a pretrained BGE-style
#: model scoring session passages): the package defaults these fields had before a shipped
#: reranker existed.
CARD_FIELDS = ("reranker_backend", "reranker_precision", "rerank_unit", "rerank_max_length",
               "rerank_candidates", "fusion_alpha", "rerank_prior")
GENERIC_RERANK: dict[str, Any] = {"reranker_backend": "sentence_transformers",
                                  "reranker_precision": "fp32", "rerank_unit": "passage",
                                  "rerank_max_length": 512, "rerank_candidates": 35,
                                  "fusion_alpha": 0.0, "rerank_prior": "rank"}

#: The default ``people_overrides``: chosen by ``engram-eval tune`` on the LoCoMo10 tune
#: conversations beside the LongMemEval tune part and run once on the held-out conversations
#: (PROVENANCE.md section 18, results/turn_top_m/topm_first_stage.yaml: what differs from
#: the chat settings; before it, section 14's results/lexical/tuned_first_stage.yaml and
#: section 7's results/structure/tuned_by_structure.yaml), then with the people's encoder
#: chosen out of fold (section 22, results/dense_encoder/encoder_choice.json, the held-out
#: conversations run once with benchmarks/locomo/conv_v1_people_config.yaml).
PEOPLE_DEFAULTS: dict[str, Any] = {"temporal": False, "weight_bm25_user": 1.0,
                                   # the people fusion chosen with the people's encoder,
                                   # out of fold (PROVENANCE.md section 22)
                                   "weight_bm25_turn": 1.0,
                                   "weight_bm25_prf": 0.0,
                                   # "NAME: text" in the BM25 documents (section 14)
                                   "lexical_speaker": "prefix",
                                   # people's chats are not reranked: the shipped reranker's
                                   # card chose so (PROVENANCE.md sections 11 and 12)
                                   "rerank": False,
                                   # people's chats are encoded by the encoder trained here
                                   # (engram_eval/models/engram-minilm-conv-v1, its stored
                                   # int8 graph; PROVENANCE.md section 22); chats keep
                                   # all-MiniLM-L6-v2, which it did not beat on them
                                   "embedding_model": "engram-minilm-conv-v1",
                                   "embedding_backend": "onnx",
                                   "embedding_precision": "int8"}

#: Fields added after runs were published, with the value that reproduces a run recorded
#: before the field existed (its sidecar lacks the key). ``verify --rerun`` rebuilds such a
#: run with these, never with a later default.
LEGACY_VALUES: dict[str, Any] = {"people_overrides": {}, "rerank_unit": "passage",
                                 "reranker_precision": "fp32", "lexical_tokenizer": "word",
                                 "lexical_stemmer": "none", "lexical_stopwords": "none",
                                 "lexical_speaker": "none", "bm25_turn_top_m": 1,
                                 "dense_turn_top_m": 1, "rerank_prior": "rank",
                                 "embedding_batch_isolated": False, "rerank_turn_top_m": 0}


def recorded_values(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A run's settings as its sidecar records them (``config_recorded``, then ``config``),
    each field the run predates at its :data:`LEGACY_VALUES` value, never a later default."""
    return {**LEGACY_VALUES, **(meta.get("config_recorded") or {}), **(meta.get("config") or {})}


#: CLI/argument-group order (stages of the pipeline).
GROUPS = ("selection", "dense", "lexical", "fusion", "temporal", "rerank", "coverage",
          "memo", "system", "runtime")
#: Groups whose fields only the retriever of that name reads: they are recorded (config and
#: fingerprint) only in that retriever's runs, so other runs' sidecars stay as they were.
RETRIEVER_GROUPS = {"memo": "memo-lexical"}
#: The group of the settings of a system from outside the package (:class:`SystemSettings`):
#: recorded only in the runs of such a system (a retriever name the package does not register).
SYSTEM_GROUP = "system"
#: The production gate's fields (:class:`engram_eval.production.settings.ProductionSettings`)
#: are declared with this group; runs have no such field.
GATE_GROUP = "gate"


def _f(default: Any, help: str, *, group: str, fingerprint: bool = True,
       choices: Sequence[Any] | None = None, lo: float | None = None, hi: float | None = None,
       cli: bool = True, hidden: bool = False) -> Any:
    """A dataclass field with the metadata used for validation, YAML, CLI and describe()."""
    assert group in GROUPS or group == GATE_GROUP, group
    meta = {"help": help, "fingerprint": fingerprint, "choices": choices, "lo": lo, "hi": hi,
            "cli": cli, "group": group, "hidden": hidden}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def short_repr(value: Any, limit: int = 80) -> str:
    """A repr of ``value`` for an error message, at most ``limit`` characters: never expands
    a big or deeply shared value (a YAML alias bomb), whatever its size."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother = 3, limit, limit
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_fields(obj: Any) -> None:
    """Type, choice and range checks of every dataclass field of ``obj`` (ConfigError)."""
    for f in fields(obj):
        v = getattr(obj, f.name)
        m = f.metadata
        t = str(f.type)
        if m.get("choices") and v not in m["choices"]:
            raise ConfigError(f"config field {f.name}={short_repr(v)}: must be one of "
                              f"{list(m['choices'])}")
        if v is None:
            if "None" not in t:
                raise ConfigError(f"config field {f.name} may not be null")
            continue
        if t == "bool":
            if not isinstance(v, bool):
                raise ConfigError(f"config field {f.name}={short_repr(v)}: must be true or false")
            continue
        if t.startswith("int"):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"config field {f.name}={short_repr(v)}: must be an integer")
        elif t == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
                raise ConfigError(f"config field {f.name}={short_repr(v)}: must be a number")
        elif t == "str":
            if not isinstance(v, str):
                raise ConfigError(f"config field {f.name}={short_repr(v)}: must be a string")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if m.get("lo") is not None and v < m["lo"]:
                raise ConfigError(f"config field {f.name}={short_repr(v)}: must be >= {m['lo']}")
            if m.get("hi") is not None and v > m["hi"]:
                raise ConfigError(f"config field {f.name}={short_repr(v)}: must be <= {m['hi']}")


@dataclass(frozen=True)
class RetrievalSettings:
    """Every setting of the hybrid retriever (see each field's help text and
    :mod:`engram_eval.retrieval.hybrid` for the pipeline). Validated on construction."""

    # dense
    use_dense: bool = _f(True, "dense retrieval over user text (signal 'dense')", group="dense")
    embedding_backend: str = _f("onnx", "embedding backend: onnx (ONNX Runtime over a graph "
                                "exported offline from the model files, cached), "
                                "sentence_transformers (torch) or flag_embedding",
                                group="dense",
                                choices=("onnx", "sentence_transformers", "flag_embedding"))
    embedding_model: str = _f("all-MiniLM-L6-v2", "embedding model: name (bundled or HF cache) "
                              "or local path", group="dense")
    embedding_precision: str = _f("fp32", "embedding inference precision", group="dense",
                                  choices=("fp32", "bf16", "int8"))
    embedding_batch_isolated: bool = _f(
        True, "encode each text in an ONNX call of its own where the precision is int8: a "
        "dynamically quantised graph scales activations per call, so a batched text's vector "
        "depends on the texts beside it (off reproduces runs made before this field)",
        group="dense")
    dense_piece_words: int = _f(128, "user text is embedded in pieces of at most this many "
                                "words (each user turn, long turns split into windows); no "
                                "truncation", group="dense", lo=8, hi=512)
    dense_piece_overlap: int = _f(16, "word overlap between windows of one long turn "
                                  "(must be smaller than dense_piece_words)", group="dense",
                                  lo=0, hi=256)
    dense_aggregate: str = _f("max", "session score from its piece similarities",
                              group="dense", choices=("max", "max_mean"))
    dense_turn_top_m: int = _f(3, "the dense signals (dense, dense_rocchio; so also the dense "
                               "feedback first pass): a turn scores its best piece, and a "
                               "session the sum of its m best turns (a session with fewer "
                               "turns sums what it has); 1 = its best turn = its best piece. "
                               "Above 1 needs dense_aggregate max", group="dense",
                               lo=1, hi=1000)
    use_dense_rocchio: bool = _f(False, "Rocchio dense feedback (signal 'dense_rocchio'): the "
                                 "question vector moved toward the best piece vectors of the "
                                 "top feedback_docs first-pass sessions, pieces re-scored "
                                 "(no new encodings)", group="dense")
    rocchio_beta: float = _f(0.5, "Rocchio: query = normalise(q + beta * mean(feedback "
                             "piece vectors))", group="dense", lo=0.0, hi=10.0)
    # lexical
    use_bm25_user: bool = _f(True, "BM25 over user text (signal 'bm25_user')", group="lexical")
    use_bm25_assistant: bool = _f(True, "BM25 over assistant text (signal 'bm25_assistant')",
                                  group="lexical")
    use_bm25_turn: bool = _f(True, "BM25 over single user turns (every turn between people), "
                             "a session scoring its best turn, or the sum of its "
                             "bm25_turn_top_m best (signal 'bm25_turn')", group="lexical")
    bm25_turn_top_m: int = _f(1, "bm25_turn: a session's score is the sum of its m best turn "
                              "scores (a turn sharing no term adds 0; a session with fewer "
                              "turns sums what it has); 1 = its best turn", group="lexical",
                              lo=1, hi=1000)
    use_bm25_prf: bool = _f(True, "pseudo-relevance feedback BM25 (signal 'bm25_prf', "
                            "RM3-style): the question expanded with the prf_terms "
                            "highest-weighted terms of the top feedback_docs first-pass "
                            "sessions, re-scored with BM25 over user text", group="lexical")
    lexical_tokenizer: str = _f("word", "tokeniser of every BM25 signal (flat-bm25 keeps the "
                                "reference's split): 'word' lower-cased [a-z0-9]+('[a-z]+)? "
                                "runs; 'unicode' case-folded letter/digit runs of any script, "
                                "each CJK character a term (engram_eval.retrieval.analyzer)",
                                group="lexical", choices=("word", "unicode"))
    lexical_stemmer: str = _f("snowball-english", "stemmer of the BM25 terms: none, or "
                              "snowball-english (PyStemmer)", group="lexical",
                              choices=("none", "snowball-english"))
    lexical_stopwords: str = _f("en-v1", "stopwords removed from the BM25 terms: none, or "
                                "en-v1 (engram_eval/lexicon/stopwords-en-v1.txt; its sha256 "
                                "is recorded)", group="lexical", choices=("none", "en-v1"))
    lexical_speaker: str = _f("none", "speakers' names in the BM25 text of a haystack WITHOUT "
                              "chat roles (people talking to each other; a chat's roles are "
                              "'user'/'assistant', never names): none, or 'prefix' (each turn "
                              "indexed as 'NAME: text', so a question naming a speaker "
                              "matches that speaker's turns)", group="lexical",
                              choices=("none", "prefix"))
    bm25_k1: float = _f(1.5, "BM25 k1", group="lexical", lo=0.0, hi=10.0)
    bm25_b: float = _f(0.75, "BM25 b", group="lexical", lo=0.0, hi=1.0)
    prf_terms: int = _f(10, "feedback terms added to the question (bm25_prf)", group="lexical",
                        lo=1, hi=200)
    feedback_docs: int = _f(1, "first-pass sessions used as feedback (bm25_prf, "
                            "dense_rocchio)", group="lexical", lo=1, hi=100)
    feedback_source: str = _f("dense", "first-pass ranking of the feedback signals: 'dense' "
                              "(falls back to bm25_user when dense is off) or 'bm25_user'; "
                              "fixed, independent of the fusion weights, so runs can be "
                              "re-fused offline", group="lexical",
                              choices=("dense", "bm25_user"))
    # fusion. The defaults of the analyser, the signals, fusion, normalisation, the weights
    # and the temporal step were chosen by `engram-eval tune` on the TUNING parts only (the
    # LongMemEval_S dev split's for chats, LoCoMo10's tune conversations for people_overrides:
    # the analyser in PROVENANCE.md section 14, dense_turn_top_m and the fusion with it in
    # section 18, results/turn_top_m/topm_first_stage.yaml; objective: mean of
    # recall_any@1, recall_all@5, ndcg_any@5), then run once on the held-out parts.
    fusion: str = _f("convex", "fusion method: 'rrf' (weighted reciprocal rank) or 'convex' "
                     "(weighted sum of per-question normalised scores)", group="fusion",
                     choices=("rrf", "convex"))
    normalisation: str = _f("minmax", "per-question score normalisation of convex fusion",
                            group="fusion", choices=("minmax", "zscore"))
    rrf_k: float = _f(60.0, "reciprocal-rank-fusion constant k (score = sum w / (k + rank))",
                      group="fusion", lo=0.0, hi=1000.0)
    weight_dense: float = _f(1.0, "fusion weight of the dense signal", group="fusion",
                             lo=0.0, hi=10.0)
    weight_bm25_user: float = _f(0.5, "fusion weight of the user BM25 signal", group="fusion",
                                 lo=0.0, hi=10.0)
    weight_bm25_assistant: float = _f(0.1, "fusion weight of the assistant BM25 signal",
                                      group="fusion", lo=0.0, hi=10.0)
    weight_bm25_turn: float = _f(0.3, "fusion weight of the turn BM25 signal (computed and "
                                 "traced when use_bm25_turn, even at weight 0)",
                                 group="fusion", lo=0.0, hi=10.0)
    weight_bm25_prf: float = _f(0.3, "fusion weight of the feedback BM25 signal",
                                group="fusion", lo=0.0, hi=10.0)
    weight_dense_rocchio: float = _f(0.0, "fusion weight of the Rocchio dense signal",
                                     group="fusion", lo=0.0, hi=10.0)
    people_overrides: dict = _f(dict(PEOPLE_DEFAULTS), "settings that replace the ones above "
                                "for a haystack WITHOUT chat roles (people talking to each "
                                "other, e.g. LoCoMo; decided per haystack by "
                                "engram_eval.data.records.has_chat_roles): a mapping field -> "
                                "value over the fusion and temporal fields, the per-structure "
                                "lexical, turn, encoder (embedding model, backend, precision) "
                                "and rerank fields; empty = one set of settings for every "
                                "haystack. YAML only.", group="fusion", cli=False)
    # temporal
    temporal: bool = _f(True, "boost sessions dated inside the question's time window",
                        group="temporal")
    temporal_boost: float = _f(1.25, "multiplier for sessions inside the time window "
                               "(applied to the non-negative prior score)", group="temporal",
                               lo=1.0, hi=10.0)
    # rerank. The defaults are the shipped reranker and the settings its card chose
    # (engram_eval/models/engram-ce-minilm-v4/card.json, PROVENANCE.md section 20); for another
    # model, `run` takes these fields from that model's card, or the generic rule
    # (GENERIC_RERANK) when it has none, unless given explicitly.
    rerank: bool = _f(True, "rerank the top candidates with a cross-encoder (people's chats: "
                      "people_overrides, off by default)", group="rerank")
    reranker_backend: str = _f("onnx", "cross-encoder backend: "
                               "sentence_transformers (torch), flag_embedding, or onnx (ONNX "
                               "Runtime over a graph exported offline from the model files, "
                               "cached)", group="rerank",
                               choices=("sentence_transformers", "flag_embedding", "onnx"))
    reranker_precision: str = _f("int8", "cross-encoder inference precision: fp32, or int8 "
                                 "(reranker_backend onnx only: dynamic quantisation, scheme "
                                 "chosen for the CPU)", group="rerank",
                                 choices=("fp32", "int8"))
    reranker_model: str = _f("engram-ce-minilm-v4", "cross-encoder: a model shipped with the "
                             "package (engram-ce-minilm-v1 to -v4), an HF id in the local "
                             "cache or a local path", group="rerank")
    rerank_candidates: int = _f(20, "how many fused candidates are reranked", group="rerank",
                                lo=1, hi=10000)
    rerank_max_length: int = _f(128, "cross-encoder max input tokens", group="rerank",
                                lo=16, hi=8192)
    rerank_unit: str = _f("turn", "what the cross-encoder scores per candidate session: "
                          "'passage' = the session text, with the focused-excerpt fallback "
                          "below (the pipeline's original rule); 'session' = the session text "
                          "only; 'turn' = each user turn with text, the session scoring its "
                          "best turn", group="rerank", choices=("passage", "session", "turn"))
    rerank_turn_top_m: int = _f(0, "rerank_unit turn: how many of a candidate's turns the "
                                "cross-encoder scores, the ones the question's dense vector "
                                "is closest to (a turn by its best piece; ties: the earlier "
                                "turn); 0 = every turn with text. Needs use_dense when above 0",
                                group="rerank", lo=0, hi=10000)
    fusion_alpha: float = _f(0.6, "weight of the prior (rerank_prior) in the reranked score",
                             group="rerank", lo=0.0, hi=1.0)
    rerank_prior: str = _f("score", "the prior blended with the cross-encoder's sigmoid: "
                           "'rank' = 1 - (fused rank - 1) / candidates (equal steps, the "
                           "original rule); 'score' = the fused score min-max normalised over "
                           "the reranked candidates (keeps how far apart the first stage put "
                           "them)", group="rerank", choices=("rank", "score"))
    passage_fallback: bool = _f(True, "retry long documents with a focused excerpt when every "
                                "base sigmoid score is under passage_floor", group="rerank")
    passage_floor: float = _f(0.001, "activation floor of the passage fallback",
                              group="rerank", lo=0.0, hi=1.0)
    passage_max_words: int = _f(160, "excerpt length limit in words", group="rerank",
                                lo=8, hi=2000)
    # coverage
    preserve_prior: bool = _f(True, "after a rerank, keep the best prior (post-temporal) "
                              "candidate inside the first result_k", group="coverage")
    result_k: int = _f(5, "window of the prior-leader coverage step", group="coverage",
                       lo=1, hi=1000)
    # runtime (not part of the fingerprint)
    batch_size: int = _f(16, "encoding batch size (16 measured fastest on 2 CPU cores)",
                         group="runtime", fingerprint=False, lo=1, hi=4096)
    use_cache: bool = _f(True, "reuse embeddings cached by (model files, precision, text)",
                         group="runtime", fingerprint=False)
    cache_dir: str = _f("", "embedding cache directory (default ~/.cache/engram-eval)",
                        group="runtime", fingerprint=False)

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        check_fields(self)
        if self.dense_piece_overlap >= self.dense_piece_words:
            raise ConfigError("config field dense_piece_overlap: must be smaller than "
                              "dense_piece_words")
        if self.dense_turn_top_m > 1 and self.dense_aggregate != "max":
            raise ConfigError("config field dense_turn_top_m: above 1 it replaces the best "
                              "turn, so it needs dense_aggregate max (not "
                              f"{self.dense_aggregate!r})")
        if self.rerank_turn_top_m and not self.use_dense:
            raise ConfigError("config field rerank_turn_top_m: above 0 it picks the turns the "
                              "dense signal ranks best, so it needs use_dense")
        if self.use_dense_rocchio and not self.use_dense:
            raise ConfigError("config field use_dense_rocchio: needs use_dense (it re-scores "
                              "the dense pieces); without dense retrieval say "
                              "--no-use-dense-rocchio too (or use --retriever bm25)")
        if self.people_overrides:
            if not isinstance(self.people_overrides, Mapping):
                raise ConfigError("config field people_overrides: must be a mapping of "
                                  "fusion/temporal field -> value")
            allowed = {f.name for f in fields(self)
                       if (f.metadata.get("group") in STRUCTURE_GROUPS
                           or f.name in STRUCTURE_RERANK_FIELDS
                           or f.name in STRUCTURE_LEXICAL_FIELDS
                           or f.name in STRUCTURE_TURN_FIELDS
                           or f.name in STRUCTURE_DENSE_FIELDS)
                       and f.name != "people_overrides"}
            bad = sorted(str(k) for k in self.people_overrides if k not in allowed)
            if bad:
                raise ConfigError(f"config field people_overrides: {bad[0]!r} is not a fusion, "
                                  f"temporal, per-structure lexical, turn, encoder or rerank "
                                  f"field; "
                                  f"allowed: {sorted(allowed)}")
            # Checked on the retrieval fields alone: a subclass's own fields (a RunConfig's
            # --shard, ...) are its own to check and never reported as people_overrides.
            applied = {f.name: getattr(self, f.name) for f in fields(RetrievalSettings)}
            applied.update(people_overrides={}, **self.people_overrides)
            try:
                RetrievalSettings(**applied)
            except ConfigError as e:
                raise ConfigError(f"config field people_overrides: {e}") from None

    # ------------------------------------------------------------------
    @classmethod
    def of(cls, config: Any) -> RetrievalSettings:
        """The retrieval settings of ``config`` (a RetrievalSettings, a RunConfig or any
        object/mapping with these attribute names); validated."""
        if type(config) is cls:
            return config
        names = [f.name for f in fields(cls)]
        if isinstance(config, Mapping):
            return cls(**{n: config[n] for n in names if n in config})
        return cls(**{n: getattr(config, n) for n in names if hasattr(config, n)})

    def for_chat_roles(self, chat_roles: bool) -> RetrievalSettings:
        """The settings a haystack uses: these for a chat (user/assistant roles), these with
        ``people_overrides`` applied for people talking to each other."""
        if chat_roles or not self.people_overrides:
            return self
        return dataclasses.replace(self, people_overrides={}, **self.people_overrides)

    def reranks_any(self) -> bool:
        """Whether some haystack is reranked: ``rerank``, or ``people_overrides`` switching
        it on for people's chats (the cross-encoder must then be resolved and recorded)."""
        return bool(self.rerank or (self.people_overrides or {}).get("rerank"))

    def signal_names(self) -> list[str]:
        """Signals switched on (computed and traced), in trace order."""
        return [name for name, flag, _ in SIGNALS if getattr(self, flag)]

    def weights(self) -> dict[str, float]:
        """Fusion weight of every switched-on signal."""
        return {name: float(getattr(self, w)) for name, flag, w in SIGNALS
                if getattr(self, flag)}

    def fusion_spec(self) -> dict[str, Any]:
        """What the question trace records under ``fusion``."""
        return {"method": self.fusion, "normalisation": self.normalisation,
                "weights": self.weights(), "k": self.rrf_k}


#: Stopword lists of ``memo_stopwords`` (the words: :mod:`engram_eval.retrieval.memo_lexical`).
MEMO_STOPWORD_LISTS = ("memo-en-v1", "memo-en-narrow", "none")


@dataclass(frozen=True)
class MemoLexicalSettings:
    """The settings of the ``memo-lexical`` retriever (what each one chooses:
    :mod:`engram_eval.retrieval.memo_lexical`'s docstring). Kept here, beside the other
    retrieval settings, so that a run configuration can inherit them without importing that
    backend (it stays out of other runs' hashed sources).
    :class:`engram_eval.runs.config.RunConfig` inherits these fields, so they are YAML keys
    and ``--memo-*`` flags of ``run`` and are recorded in a memo-lexical run's sidecar."""

    memo_limit: int = _f(10, "sessions Memo returns (phrase hits, then weighted hits); also "
                         "the phrase step's page", group="memo", lo=1, hi=10000)
    memo_page_min: int = _f(8, "each token/pair phrase keeps its top max(memo_limit, this) "
                            "sessions", group="memo", lo=1, hi=10000)
    memo_window: int = _f(8, "question tokens searched (content words first, stopwords fill "
                          "the rest)", group="memo", lo=1, hi=64)
    memo_window_order: str = _f("priority", "order of the window that pairs are taken from: "
                                "priority (content words, then the stopwords) or question "
                                "(question order)", group="memo",
                                choices=("priority", "question"))
    memo_stopwords: str = _f("memo-en-v1", "stopword list of the content-first window",
                             group="memo", choices=MEMO_STOPWORD_LISTS)
    memo_min_token_chars: int = _f(2, "shortest non-Han question token kept (code points)",
                                   group="memo", lo=1, hi=64)
    memo_cjk_min_run: int = _f(2, "shortest run of Han characters kept as a token",
                               group="memo", lo=1, hi=64)
    memo_pair_weight: str = _f("string", "weight of a pair phrase: string = len('a b') "
                               "(tokens and the space), tokens = len(a) + len(b)",
                               group="memo", choices=("string", "tokens"))
    memo_event_text: str = _f("content", "what an event's FTS5 row holds: content (the turn's "
                              "text) or speaker (\"<role or speaker name>: <text>\")",
                              group="memo", choices=("content", "speaker"))
    memo_tokenizer: str = _f("unicode61", "FTS5 tokenizer of the event index",
                             group="memo", choices=("unicode61", "ascii", "porter unicode61"))

    def __post_init__(self) -> None:
        if type(self) is MemoLexicalSettings:
            check_fields(self)

    @classmethod
    def from_config(cls, config: Any) -> MemoLexicalSettings:
        """The memo settings of ``config`` (any object with these attribute names)."""
        names = [f.name for f in fields(cls)]
        return cls(**{n: getattr(config, n) for n in names if hasattr(config, n)})

    def describe(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}



@dataclass(frozen=True)
class SystemSettings:
    """How a memory system from outside the package is run (:mod:`engram_eval.retrieval.systems`:
    an entry point, a ``py:MODULE:FACTORY`` or ``http``). :class:`engram_eval.runs.config.RunConfig`
    inherits these fields (``--system-config``, ``--real-ids``, ...); they are recorded only in
    the runs of such a system, so the package's own runs keep the sidecars they had."""

    system_config: str = _f("", "JSON or YAML file of the system's own settings (a mapping), "
                            "handed to its factory (HTTP: sent with each index request); "
                            "the settings and their sha256 are recorded, not the path",
                            group="system", fingerprint=False)
    system_settings: dict = _f({}, "the system's own settings (read from --system-config; "
                               "recorded and fingerprinted)", group="system", cli=False)
    system_url: str = _f("", "--retriever http: the system server's base URL (no "
                         "credentials in it: they would be sent, logged and recorded)",
                         group="system", fingerprint=False)
    real_ids: bool = _f(False, "show the system the dataset's real session ids, in the "
                        "dataset's order (labelled 'ids visible'; LongMemEval_S's evidence ids "
                        "start with answer_). Default: opaque ids, shuffled", group="system")
    id_salt: str = _f("", "salt of the opaque session ids (sha256 of salt, question and "
                      "session id); recorded", group="system")
    id_seed: int = _f(0, "seed of the shuffled order the system sees a haystack in; recorded",
                      group="system", lo=0, hi=2**63 - 1)
    system_deadline: float = _f(60.0, "HTTP: total seconds one request may take, however "
                                "slowly the server sends (then retried)", group="system",
                                fingerprint=False, lo=0.01, hi=86400.0)
    system_max_bytes: int = _f(8 * 2**20, "HTTP: the most bytes of one reply read (a longer "
                               "reply stops the run)", group="system", fingerprint=False,
                               lo=1024, hi=2**31)
    system_attempts: int = _f(3, "HTTP: tries per request (the first included) on a timeout, "
                              "a connection failure, 429 or 5xx, with exponential backoff",
                              group="system", fingerprint=False, lo=1, hi=20)
    system_backoff: float = _f(1.0, "HTTP: seconds before the first retry (doubled each time, "
                               "with jitter)", group="system", fingerprint=False,
                               lo=0.0, hi=600.0)

    def __post_init__(self) -> None:
        if type(self) is SystemSettings:
            check_fields(self)

    @classmethod
    def of_config(cls, config: Any) -> SystemSettings:
        """The system settings of ``config`` (any object with these attribute names)."""
        names = [f.name for f in fields(cls)]
        return cls(**{n: getattr(config, n) for n in names if hasattr(config, n)})


def describe_settings(settings: RetrievalSettings) -> dict[str, Any]:
    """The fingerprinted settings grouped by stage (``dense``, ``lexical``, ``fusion``,
    ``temporal``, ``rerank``, ``coverage``), derived from the field metadata, plus
    ``signals`` (the switched-on signals). A stage that is off keeps only its switch
    (``{"use_dense": false, ...}`` without the embedding model; ``{"rerank": false}``),
    since its parameters cannot change the ranking."""
    out: dict[str, Any] = {"signals": settings.signal_names()}
    for f in fields(settings):
        m = f.metadata
        if not m["fingerprint"]:
            continue
        g = m["group"]
        off = ((g == "dense" and not settings.use_dense)
               or (g == "rerank" and not settings.reranks_any()))
        if off and not (f.name.startswith("use_") or f.name == "rerank"):
            continue
        out.setdefault(g, {})[f.name] = getattr(settings, f.name)
    return out


_S = TypeVar("_S", bound="RetrievalSettings")


def encoder_given(settings: _S, explicit: Collection[str]) -> _S:
    """``settings`` where an encoder was given explicitly (``explicit``: CLI flags and YAML
    keys naming one of :data:`STRUCTURE_DENSE_FIELDS`): that encoder serves every haystack,
    so the encoder fields of ``people_overrides`` are dropped, unless ``people_overrides`` was
    given too (then it says what people's chats use). ``--embedding-model X`` measures X on
    chats and people's chats alike, never X beside the default people's encoder."""
    if "people_overrides" in explicit or not set(explicit) & set(STRUCTURE_DENSE_FIELDS):
        return settings
    given = dict(settings.people_overrides or {})
    kept = {k: v for k, v in given.items() if k not in STRUCTURE_DENSE_FIELDS}
    if kept == given:
        return settings
    return dataclasses.replace(settings, people_overrides=kept)


def apply_model_card(settings: RetrievalSettings, card: Mapping[str, Any] | None,
                     explicit: Collection[str], label: str
                     ) -> tuple[RetrievalSettings, dict[str, str]]:
    """``settings`` with the reranker's chosen configuration applied, and where each rerank
    field came from. ``card`` is the ``settings`` mapping of the model's settings card (None:
    the model has none); ``explicit`` the fields the user gave (CLI or YAML: those always
    win); ``label`` names the card in the origins (e.g. ``card:engram-ce-minilm-v1``).

    Without a rerank anywhere nothing changes. Otherwise each of :data:`CARD_FIELDS` not given
    explicitly takes the card's value; a card that lacks a field of :data:`LEGACY_VALUES` was
    written before the field existed and takes its legacy value (``rerank_prior`` 'rank' for
    engram-ce-minilm-v1 to -v3); a model without a card gets the generic rule
    (:data:`GENERIC_RERANK`). The card's ``people_overrides`` (e.g. ``{"rerank": false}``:
    people's chats not reranked) are merged into the current ones; where ``people_overrides``
    was given, the card's keys it does not name are added to it (the given keys win)."""
    if not settings.reranks_any():
        return settings, {}
    card = dict(card or {})
    changes: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in CARD_FIELDS:
        if name in explicit:
            origins[name] = "explicit"
        elif name in card:
            changes[name] = card[name]
            origins[name] = label
        elif card and name in LEGACY_VALUES:
            changes[name] = LEGACY_VALUES[name]
            origins[name] = f"{label} (chosen before the field existed)"
        else:
            changes[name] = GENERIC_RERANK[name]
            origins[name] = "generic (the model has no settings card)"
    people = card.get("people_overrides")
    if people:
        if "people_overrides" in explicit:
            # per key: the ones the user gave win, the card's others still apply (a tuned
            # YAML's fusion overrides do not switch on a rerank the card turned off)
            given = dict(settings.people_overrides or {})
            kept = {k: v for k, v in people.items() if k not in given}
            if kept:
                changes["people_overrides"] = {**given, **kept}
                origins["people_overrides"] = (f"explicit, + {label} for "
                                               f"{', '.join(sorted(kept))}")
            else:
                origins["people_overrides"] = "explicit"
        else:
            changes["people_overrides"] = {**(settings.people_overrides or {}), **people}
            origins["people_overrides"] = f"{label} (merged into the defaults)"
    try:
        return dataclasses.replace(settings, **changes), origins
    except ConfigError as e:
        raise ConfigError(f"{label}: its settings are not valid here: {e}") from None


def pipeline_line(settings: RetrievalSettings, origins: Mapping[str, str] | None = None
                  ) -> str:
    """One line naming the stages a hybrid run goes through with ``settings`` (printed by
    ``run``; ``origins``: where the rerank settings came from)."""
    def encoder(s: RetrievalSettings) -> str:
        return f"{s.embedding_model} {s.embedding_backend} {s.embedding_precision}"

    people_settings = settings.for_chat_roles(False)
    dense = ""
    if settings.use_dense:
        dense = f" (dense: {encoder(settings)}"
        if encoder(people_settings) != encoder(settings):
            dense += f"; people's chats: {encoder(people_settings)}"
        dense += ")"
    stages = ["signals " + "+".join(settings.signal_names()) + dense,
              f"{settings.fusion} fusion ({settings.normalisation})"
              if settings.fusion == "convex" else f"rrf fusion (k {settings.rrf_k:g})"]
    if settings.temporal:
        stages.append(f"temporal x{settings.temporal_boost:g}"
                      + ("" if people_settings.temporal else " (people's chats: off)"))
    if settings.reranks_any():
        src = sorted({v.split(" (")[0] for v in (origins or {}).values()
                      if not v.startswith("explicit")})
        people = people_settings.rerank

        def depth(s: RetrievalSettings) -> str:
            turns = f" ({s.rerank_turn_top_m} closest turns each)" if s.rerank_turn_top_m else ""
            return f"top {s.rerank_candidates}{turns}, fusion_alpha {s.fusion_alpha:g}"

        own = (f"; people's chats: {depth(people_settings)}"
               if people and depth(people_settings) != depth(settings) else "")
        stages.append(
            f"rerank {settings.reranker_model} ({settings.reranker_backend} "
            f"{settings.reranker_precision}, unit {settings.rerank_unit}, "
            f"{settings.rerank_max_length} tokens, {depth(settings)}, "
            f"prior {settings.rerank_prior}"
            + (f"; settings from {', '.join(src)}" if src else "")
            + ("" if settings.rerank else "; people's chats only")
            + ("" if people or not settings.rerank else "; people's chats: off") + own + ")")
        if settings.preserve_prior:
            stages.append(f"coverage (prior leader in top {settings.result_k})")
    else:
        stages.append("no rerank")
    return "pipeline: " + " -> ".join(stages)


def replace_settings(settings: RetrievalSettings, **changes: Any) -> RetrievalSettings:
    """``dataclasses.replace`` (validates)."""
    return dataclasses.replace(settings, **changes)
