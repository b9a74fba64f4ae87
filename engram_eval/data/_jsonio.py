"""Shared helpers for the dataset loaders: reading (gzipped) JSON, schemas, error paths.

Private to ``engram_eval.data``; every failure is raised as a :class:`DataError` that names
the file, the record and the field.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import IO, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from engram_eval.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
FILE_RECORD = "(file)"
ROOT_FIELD = "(root)"


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes (the extension is ignored)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path: str | Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, un-gzipping on the fly when it starts with the gzip
    magic bytes. This is the one place that sniffs gzip; every reader goes through it."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def open_text(path: str | Path) -> IO[str]:
    """Text (UTF-8) view of :func:`open_binary`."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8")


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, transparently un-gzipping it when it starts with the gzip magic bytes.

    The extension is ignored: ``data.json`` that is really gzip is read, ``data.json.gz`` that
    is really plain JSON is read too.
    """
    p = Path(path)
    try:
        with open_binary(p) as f:
            raw = f.read()
    except FileNotFoundError as exc:
        raise DataError(p, FILE_RECORD, ROOT_FIELD, f"cannot read file: {exc}") from exc
    except (OSError, EOFError, zlib.error) as exc:
        what = "not a valid gzip stream" if _safe_is_gzip(p) else "cannot read file"
        raise DataError(p, FILE_RECORD, ROOT_FIELD, f"{what}: {exc}") from exc
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DataError(
            p,
            FILE_RECORD,
            ROOT_FIELD,
            f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from exc
    except UnicodeDecodeError as exc:
        raise DataError(p, FILE_RECORD, ROOT_FIELD, f"not valid UTF-8 JSON text: {exc}") from exc


def _safe_is_gzip(path: Path) -> bool:
    try:
        return is_gzip(path)
    except OSError:
        return False


def load_schema(name: str) -> dict[str, Any]:
    """Load ``engram_eval/schemas/<name>`` (package data) as a dict (the one schema loader:
    dataset record schemas and the sidecar schema alike)."""
    text = (resources.files("engram_eval") / "schemas" / name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def record_validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator for one record: the ``items`` sub-schema of a top-level array schema.

    The record schemas are written without ``$ref`` so the sub-schema stands alone.
    """
    item_schema = schema["items"]
    Draft202012Validator.check_schema(item_schema)
    return Draft202012Validator(item_schema)


def format_field(parts: Iterable[str | int]) -> str:
    """``['haystack_sessions', 3, 2, 'content']`` -> ``'haystack_sessions[3][2].content'``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(record)"


def first_error(validator: Draft202012Validator, instance: Any) -> ValidationError | None:
    """The first schema error of ``instance`` in document order (None when valid).

    Errors are ordered by their path, so the reported field is the earliest offending one;
    within one location the most relevant error (jsonschema's ``best_match``) wins.
    """
    errors = list(validator.iter_errors(instance))
    if not errors:
        return None
    errors.sort(key=lambda e: _path_key(e.absolute_path))
    first_path = _path_key(errors[0].absolute_path)
    same = [e for e in errors if _path_key(e.absolute_path) == first_path]
    best = best_match(same)
    return best if best is not None else errors[0]


def _path_key(path: Iterable[str | int]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def schema_error_to_data_error(path: str | Path, record: str, error: ValidationError) -> DataError:
    """One readable :class:`DataError` for a jsonschema error inside ``record``.

    For a missing property the field names the missing property itself.
    """
    parts: list[str | int] = list(error.absolute_path)
    reason = error.message
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            parts.append(missing[0])
            reason = "required field is missing"
    elif error.validator == "type":
        reason = f"expected {_type_words(error.validator_value)}, got {_json_type(error.instance)}"
    if len(reason) > 300:
        reason = reason[:297] + "..."
    return DataError(path, record, format_field(parts), reason)


def _type_words(value: Any) -> str:
    if isinstance(value, str):
        return value
    return " or ".join(str(v) for v in value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
