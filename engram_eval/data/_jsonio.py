"""Shared helpers for the dataset loaders: reading (gzipped) JSON, schemas, error paths.

Private to ``engram_eval.data``; every failure is raised as a :class:`DataError` that names
the file, the record and the field.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import IO, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from engram_eval.errors import DataError
from engram_eval.io import open_regular

GZIP_MAGIC = b"\x1f\x8b"
FILE_RECORD = "(file)"
ROOT_FIELD = "(root)"
#: Deepest nesting a dataset file may have, the top-level list counting as level 1 (real
#: LongMemEval and LoCoMo files nest 5 or 6 levels). Enforced while streaming, before the
#: parser's memory grows (an ijson prefix stack grows with depth squared), and on whole-file
#: loads before schema validation (which recurses once per level).
MAX_DEPTH = 64
#: Longest single string (a field value or key), in characters; real turns are a few KB.
MAX_STRING_CHARS = 64 * 2**20
#: A field path in an error message is cut to this many characters.
MAX_FIELD_CHARS = 120


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes (the extension is ignored). Only a
    regular file is opened (:func:`engram_eval.io.open_regular`: a FIFO or device is one
    error naming it, never a hang)."""
    with open_regular(path) as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path: str | Path) -> IO[bytes]:
    """Open ``path`` for reading bytes, un-gzipping on the fly when it starts with the gzip
    magic bytes. This is the one place that sniffs gzip; every reader goes through it. Only a
    regular file is opened."""
    f = open_regular(path)
    try:
        magic = f.read(2)
        f.seek(0)
    except BaseException:
        f.close()
        raise
    if magic == GZIP_MAGIC:
        g = gzip.GzipFile(fileobj=f, mode="rb")
        g.myfileobj = f  # type: ignore[assignment]  # closing it closes the file (as gzip.open)
        return g  # type: ignore[return-value]
    return f


def open_text(path: str | Path) -> IO[str]:
    """Text (UTF-8) view of :func:`open_binary`."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8")


def read_json(path: str | Path, id_key: str | None = None) -> Any:
    """Parse a JSON file, transparently un-gzipping it when it starts with the gzip magic bytes.

    The extension is ignored: ``data.json`` that is really gzip is read, ``data.json.gz`` that
    is really plain JSON is read too. The nesting and string limits (:data:`MAX_DEPTH`,
    :data:`MAX_STRING_CHARS`) are checked before anything is returned; a violation is one
    :class:`DataError` naming the record (``<id_key>=<id> (index N)`` for a top-level list of
    objects) and the field.
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
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DataError(
            p,
            FILE_RECORD,
            ROOT_FIELD,
            f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from exc
    except UnicodeDecodeError as exc:
        raise DataError(p, FILE_RECORD, ROOT_FIELD, f"not valid UTF-8 JSON text: {exc}") from exc
    except RecursionError:
        # Nested deeper than Python's parser allows: the streaming scan names where.
        del raw
        locate_limit_violation(p, id_key)
        raise DataError(p, FILE_RECORD, ROOT_FIELD,
                        f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise DataError(p, FILE_RECORD, ROOT_FIELD, f"not valid JSON: {str(exc)[:200]}") from None
    check_limits(p, data, id_key)
    return data


def _safe_is_gzip(path: Path) -> bool:
    try:
        return is_gzip(path)
    except OSError:
        return False


def _ijson() -> Any:
    try:
        import ijson
    except ImportError:  # pragma: no cover - ijson is a declared dependency
        raise DataError("(ijson)", FILE_RECORD, ROOT_FIELD,
                        "streaming needs the 'ijson' package: pip install 'ijson>=3.2'") from None
    return ijson


def iter_list_items(path: str | Path, id_key: str | None = None) -> Iterator[Any]:
    """The elements of the top-level JSON list of ``path`` (plain or gzipped), one at a time.

    Streams with ``ijson``: basic parse events are checked against :data:`MAX_DEPTH` and
    :data:`MAX_STRING_CHARS` *before* they reach the object builder, so a hostile file (say
    400 KB of nested ``[``) fails with one :class:`DataError` naming the record and the field
    instead of growing the parser's memory. Syntax and read errors are :class:`DataError` too.
    """
    ijson = _ijson()
    from ijson.utils import sendable_list

    backend = ijson.get_backend(ijson.backend)
    p = Path(path)
    too_deep = False
    with open_binary(p) as f:
        out = sendable_list()
        send = backend.parse_basecoro(backend.items_basecoro(out, "item")).send
        depth = 0
        try:
            for event, value in ijson.basic_parse(f, use_float=True):
                if event == "start_map" or event == "start_array":
                    depth += 1
                    if depth > MAX_DEPTH:
                        too_deep = True
                        break
                elif event == "end_map" or event == "end_array":
                    depth -= 1
                elif (event == "string" or event == "map_key") and \
                        len(value) > MAX_STRING_CHARS:
                    too_deep = True
                    break
                send((event, value))
                if out:
                    items = list(out)
                    out.clear()
                    yield from items
        except ijson.JSONError as exc:
            raise DataError(p, FILE_RECORD, ROOT_FIELD, f"not valid JSON: {exc}") from exc
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(p, FILE_RECORD, ROOT_FIELD, f"cannot read file: {exc}") from exc
    if too_deep:
        locate_limit_violation(p, id_key)
        raise DataError(p, FILE_RECORD, ROOT_FIELD,  # pragma: no cover - located above
                        f"nested deeper than {MAX_DEPTH} levels or a string too long")


def _record_label(top_is_list: bool, key: str | int, rid: str | None, id_key: str | None
                  ) -> str:
    if not top_is_list:
        return f"{id_key}={key}" if id_key else f"key {key!r}"
    if rid:
        return f"{id_key}={rid} (index {key})"
    return f"index {key}"


def locate_limit_violation(path: str | Path, id_key: str | None = None) -> None:
    """Stream ``path`` with full path tracking and raise the :class:`DataError` for its first
    value (in file order) nested deeper than :data:`MAX_DEPTH` or a string longer than
    :data:`MAX_STRING_CHARS`; return when there is none (or on a syntax error before one).

    The slow path of :func:`iter_list_items` and :func:`read_json`: it runs only once a
    violation is known, so the common path does not pay for tracking field paths. Memory
    stays bounded by the depth limit (it stops at the first violation).
    """
    ijson = _ijson()
    p = Path(path)
    stack: list[list[Any]] = []  # per open container: [is_list, current index or key]
    rid: str | None = None
    reason = ""
    try:
        with open_binary(p) as f:
            for event, value in ijson.basic_parse(f, use_float=True):
                if event == "end_map" or event == "end_array":
                    stack.pop()
                    if len(stack) == 1:
                        rid = None
                    continue
                if event == "map_key":
                    if len(value) > MAX_STRING_CHARS:
                        reason = f"a key of {len(value)} characters (limit {MAX_STRING_CHARS})"
                        break
                    stack[-1][1] = value
                    continue
                if stack and stack[-1][0]:
                    stack[-1][1] += 1
                if event == "start_map" or event == "start_array":
                    if len(stack) >= MAX_DEPTH:
                        reason = (f"nested deeper than {MAX_DEPTH} levels (real datasets nest "
                                  "fewer than 10); refusing to parse further")
                        break
                    stack.append([event == "start_array", -1])
                elif event == "string":
                    if len(value) > MAX_STRING_CHARS:
                        reason = (f"a string of {len(value)} characters "
                                  f"(limit {MAX_STRING_CHARS})")
                        break
                    if (id_key and len(stack) == 2 and stack[0][0] and not stack[1][0]
                            and stack[1][1] == id_key):
                        rid = value
    except (ijson.JSONError, OSError, EOFError, zlib.error):
        return
    if not reason:
        return
    if not stack:
        raise DataError(p, FILE_RECORD, ROOT_FIELD, reason)
    record = _record_label(stack[0][0], stack[0][1], rid, id_key)
    field = format_field([part for _, part in stack[1:]])
    if len(field) > MAX_FIELD_CHARS:
        field = field[:MAX_FIELD_CHARS] + f"... ({len(stack) - 1} levels)"
    raise DataError(p, record, field, reason)


def check_limits(path: str | Path, data: Any, id_key: str | None = None) -> None:
    """Raise the :class:`DataError` of :func:`locate_limit_violation` when the parsed ``data``
    of ``path`` nests deeper than :data:`MAX_DEPTH` or holds a string longer than
    :data:`MAX_STRING_CHARS`. Iterative (no recursion), so it is safe to run before schema
    validation, which recurses once per level."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    bad = False
    while stack and not bad:
        obj, depth = stack.pop()
        if isinstance(obj, dict):
            if depth > MAX_DEPTH or any(len(k) > MAX_STRING_CHARS for k in obj):
                bad = True
            children: Iterable[Any] = obj.values()
        elif isinstance(obj, list):
            bad = depth > MAX_DEPTH
            children = obj
        else:
            bad = isinstance(obj, str) and len(obj) > MAX_STRING_CHARS
            continue
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            elif isinstance(child, str) and len(child) > MAX_STRING_CHARS:
                bad = True
    if bad:
        locate_limit_violation(path, id_key)
        raise DataError(path, FILE_RECORD, ROOT_FIELD,  # pragma: no cover - located above
                        f"nested deeper than {MAX_DEPTH} levels or a string too long")


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
