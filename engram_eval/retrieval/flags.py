"""The package's argument parser and option types, and command-line options generated
from a settings dataclass's fields.

:class:`ArgumentParser` is the one parser class of every command line (the package, its
benchmarks and scripts): no abbreviated options, no value of an unknown option echoed.
The option types (:func:`finite_float`, :func:`positive_float`, :func:`int_at_least`,
:func:`output_file`) turn a bad value into one usage error naming the option.

Every field declared with :func:`engram_eval.retrieval.settings._f` carries its help text,
group, choices and whether it is settable on the command line (``cli``) or hidden (test-only).
:func:`add_field_arguments` turns those into one option per field (``--field-name``; a bool
field gets ``--x`` / ``--no-x``), in one argument group per settings group, each default
None so that only an explicit value overrides a file or the defaults; :func:`given_fields`
reads the explicit values back. ``engram-eval run`` (:func:`engram_eval.runs.config.
add_arguments`, :class:`~engram_eval.runs.config.RunConfig`) and ``engram-eval production``
(:mod:`engram_eval.cli.production`, :class:`~engram_eval.production.settings.
ProductionSettings`) both generate their settings options here, so the flags, their help and
their shown defaults come from the fields and cannot drift from them.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Any


class ArgumentParser(argparse.ArgumentParser):
    """The package's argument parser: every command line of the package, its benchmarks and
    scripts is built with it (``tests/cli/test_no_abbrev.py`` checks), subcommands included
    (``add_subparsers`` makes them of the parent's class).

    * Long options are never abbreviated (``allow_abbrev=False``): ``--api-key sk-...``
      is an unknown option, not ``--api-key-env`` with a key for its value.
    * An unknown option is named without its value (``--api-key=...`` and the word after
      ``--api-key`` are not printed: they may be a secret typed by mistake)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {unknown_arguments(extras)}")
        return parsed


def unknown_arguments(extras: list[str]) -> str:
    """The unknown arguments ``extras`` as an error names them: an option by its name only
    (its ``=value`` and the word after it are not shown), any other word as it is."""
    out: list[str] = []
    hidden = 0
    after_option = False
    for word in extras:
        if word.startswith("-") and len(word) > 1:
            name, eq, _ = word.partition("=")
            out.append(name)
            hidden += bool(eq)
            after_option = not eq
        elif after_option:
            hidden += 1
            after_option = False
        else:
            out.append(word)
    shown = " ".join(out)
    return shown + (f" ({hidden} value(s) not shown: they may hold a secret)" if hidden else "")


def finite_float(text: str) -> float:
    """``argparse`` type of a float option: a finite number; NaN and infinities are one
    usage error naming the option (argparse adds it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """``argparse`` type of a float option that must be above zero (a number of seconds):
    a finite number > 0; anything else is one usage error naming the option."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number above 0")
    return value


positive_float.__name__ = "positive number"


def int_at_least(lo: int, what: str = "the value") -> Callable[[str], int]:
    """``argparse`` type of an integer option with a floor: an integer >= ``lo``; anything
    else is one usage error naming the option (argparse adds it) and saying what is wrong
    (``'-3': a seed must be >= 0``, ``'x' is not an integer``). ``what`` names the value in
    the message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must be >= {lo}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own usage errors
    return parse


#: ``argparse`` type of a seed option: an integer >= 0.
seed_int = int_at_least(0, "a seed")
#: ``argparse`` type of a count option (folds, bins, resamples, questions): an integer >= 1.
count_int = int_at_least(1, "a count")


def output_file(text: str) -> str:
    """``argparse`` type of an option naming a file to write: an existing directory, or a
    path ending in a separator (which names one), is one usage error naming the option,
    before any work (else the writers, which refuse to overwrite, would call it an
    existing output). Whether the file may exist is the command's own rule."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give the path of a file "
                                         "to write")
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} ends in {text[-1]!r}, which names a "
                                         "directory; give the path of a file to write")
    return text


output_file.__name__ = "file path"


def arg_type(name: str, type_name: str) -> Any:
    """The ``argparse`` type of the option of field ``name`` (declared as ``type_name``)."""
    base = type_name.split(" ")[0]
    if base == "float":
        return finite_float
    if base == "int":
        return seed_int if name.endswith("seed") else int
    return str


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_field_arguments(parser: argparse.ArgumentParser, settings_cls: Any,
                        group_help: Mapping[str, str], *,
                        groups: Iterable[str] | None = None) -> dict[str, Any]:
    """One option per CLI-settable field of ``settings_cls`` whose group is in ``groups``
    (default: every key of ``group_help``, in that order), each in the argument group of
    its settings group; returns the argument groups by name. Help shows the field's
    default."""
    names = list(group_help if groups is None else groups)
    out = {g: parser.add_argument_group(g, group_help[g]) for g in names}
    for f in fields(settings_cls):
        m = f.metadata
        if not m.get("cli", False) or m["group"] not in out:
            continue
        target = out[m["group"]]
        opt = option_name(f.name)
        t = str(f.type)
        help_text = (argparse.SUPPRESS if m.get("hidden")
                     else m["help"] + f" (default: {f.default!r})")
        if t == "bool":
            target.add_argument(opt, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=None, help=help_text)
        else:
            target.add_argument(opt, dest=f.name, type=arg_type(f.name, t), default=None,
                                help=help_text, choices=m["choices"])
    return out


def given_fields(args: argparse.Namespace, settings_cls: Any) -> dict[str, Any]:
    """The fields of ``settings_cls`` given explicitly in ``args`` (not None)."""
    out = {}
    for f in fields(settings_cls):
        v = getattr(args, f.name, None)
        if v is not None:
            out[f.name] = v
    return out
