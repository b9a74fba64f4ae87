"""Tiny randomly initialised models built locally for tests (nothing is downloaded).

* :func:`build_embedding_model` writes a sentence-transformers model directory (BERT with
  hidden size 32, 2 layers, 2 heads, mean pooling, ``max_seq_length`` 64) that loads through
  ``SentenceTransformer`` and FlagEmbedding's ``FlagModel``.
* :func:`build_cross_encoder` writes a ``BertForSequenceClassification`` (``num_labels=1``)
  directory that loads through sentence-transformers' ``CrossEncoder`` and FlagEmbedding's
  ``FlagReranker``.

The vocabulary is a small word list plus single characters (and their ``##`` continuation
forms), so any lower-case ASCII text tokenises into real pieces rather than ``[UNK]``.
Weights come from ``torch.manual_seed``, so the same call writes the same files.
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = """
the a an i my me you your we is are was were be been to of and in on at for with from by
what which who when where how did do does have has had buy bought adopted adopt puppy dog
dogs cat cats breed border collie golden retriever shelter volunteer hours week weeks ago
music concert tickets hotel trip denver guitar piano ukulele instrument instruments time
best personal run running race bakery cake wedding sister coffee espresso machine skillet
cast iron pan podcast podcasts train commute listen book books recommend travel city
""".split()
MAX_SEQ_LENGTH = 64
# Large enough for the default rerank_max_length (512) and FlagModel's passage length (512).
MAX_POSITIONS = 512


def vocabulary() -> list[str]:
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = ["##" + c for c in string.ascii_lowercase + string.digits]
    return list(dict.fromkeys(SPECIAL_TOKENS + WORDS + chars + pieces))


def _tokenizer(directory: Path):  # type: ignore[no-untyped-def]
    import inspect

    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    words = vocabulary()
    vocab.write_text("\n".join(words) + "\n", encoding="utf-8")
    # transformers 5 takes ``vocab`` (a path or a dict) and silently ignores ``vocab_file``.
    params = inspect.signature(BertTokenizerFast.__init__).parameters
    key = "vocab" if "vocab" in params else "vocab_file"
    tok = BertTokenizerFast(**{key: str(vocab)}, do_lower_case=True,
                            model_max_length=MAX_POSITIONS)
    assert len(tok) == len(words), (len(tok), len(words))
    return tok


def _bert_config(vocab_size: int, **extra: object):  # type: ignore[no-untyped-def]
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=MAX_POSITIONS, **extra)


def build_embedding_model(directory: str | Path, seed: int = 0) -> Path:
    """Write a tiny sentence-transformers model (BERT + mean pooling) into ``directory``."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # older sentence-transformers
        from sentence_transformers.models import Pooling, Transformer

    from transformers import BertModel

    out = Path(directory)
    src = out.parent / (out.name + "-hf")
    torch.manual_seed(seed)
    tok = _tokenizer(src)
    BertModel(_bert_config(len(tok))).save_pretrained(src)
    tok.save_pretrained(src)
    transformer = Transformer(str(src), max_seq_length=MAX_SEQ_LENGTH)
    dim = transformer.auto_model.config.hidden_size
    pooling = Pooling(dim, pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    model.save(str(out))
    # The transformer is saved at the top level with tokenizer.json; keep vocab.txt too so
    # that slow-tokenizer loaders find it.
    if not (out / "vocab.txt").exists():
        (out / "vocab.txt").write_text((src / "vocab.txt").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    assert (out / "tokenizer.json").is_file(), "tokenizer.json missing from the saved model"
    return out


def build_cross_encoder(directory: str | Path, seed: int = 1) -> Path:
    """Write a tiny ``BertForSequenceClassification`` (one logit) into ``directory``.

    ``initializer_range`` is larger than BERT's default so that different inputs give
    visibly different logits (a default-initialised tiny model scores everything alike).
    """
    import torch
    from transformers import BertForSequenceClassification

    out = Path(directory)
    torch.manual_seed(seed)
    tok = _tokenizer(out)
    config = _bert_config(len(tok), num_labels=1, initializer_range=0.2)
    BertForSequenceClassification(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def offline_env(tmp: Path) -> dict[str, str]:
    """The current environment with an empty Hugging Face home and no network access (for a
    subprocess that must find every model locally)."""
    import os

    env = dict(os.environ)
    env.pop("HF_HUB_CACHE", None)
    env.pop("TRANSFORMERS_CACHE", None)
    hf_home = tmp / "hf-home"
    hf_home.mkdir(exist_ok=True)
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env
