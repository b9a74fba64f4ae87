"""One huge string inside a dataset (issue 43, "Hangs and memory"): refused by the
64 Mi-character string limit while the file is read, once the limit is passed -- not after
a parser has built the string (minutes and gigabytes for 1.5 GB).

The inputs are real files built cheaply: a 1.5 GB string inside a ``.json.gz`` is a gzip
file of many members, each the same compressed megabyte (a gzip reader joins members), so
it costs 1.5 MB of disk; the 300 MB plain file is written a megabyte at a time. What is
asserted is how far the reader read (its byte count), never a time. The string limit is
lowered (``MAX_STRING_CHARS``) only for the cases about what counts as a character, so
their files stay small.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_eval.data import _jsonio
from engram_eval.data.locomo import load_locomo
from engram_eval.data.longmemeval import iter_longmemeval, load_longmemeval
from engram_eval.errors import InputError

MB = 2**20
TINY_LME = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
LIMIT = _jsonio.MAX_STRING_CHARS  # 64 Mi characters
HEAD = b'[{"question_id": "q1", "question_type": "single-session-user", "question": "'
TAIL = b'"}]'


@pytest.fixture()
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The byte counts every capped reader reached (decompressed bytes for gzip)."""
    counts: list[int] = []
    real = _jsonio.CappedReader.read

    def counting(self: _jsonio.CappedReader, n: int | None = -1) -> bytes:
        out = real(self, n)
        counts.append(self.count)
        return out

    monkeypatch.setattr(_jsonio.CappedReader, "read", counting)
    yield counts


def gzip_of_repeats(path: Path, head: bytes, block: bytes, times: int, tail: bytes) -> None:
    """``head + block * times + tail``, gzipped as one member per piece: ``block`` is
    compressed once and written ``times`` times."""
    packed = gzip.compress(block, mtime=0)
    with path.open("wb") as f:
        f.write(gzip.compress(head, mtime=0))
        for _ in range(times):
            f.write(packed)
        f.write(gzip.compress(tail, mtime=0))


def plain_of_repeats(path: Path, head: bytes, block: bytes, times: int, tail: bytes) -> None:
    with path.open("wb") as f:
        f.write(head)
        for _ in range(times):
            f.write(block)
        f.write(tail)


def one_error(call: Callable[[], Any], path: Path) -> InputError:
    with pytest.raises(InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(str(path)) and f"longer than {_jsonio.MAX_STRING_CHARS} characters" \
        in msg, msg
    return e.value


LOADERS = {
    "load_longmemeval": lambda p: load_longmemeval(p),
    "iter_longmemeval": lambda p: list(iter_longmemeval(p)),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_1_5_gb_string_in_a_json_gz_stops_at_the_limit(loader: str, tmp_path: Path,
                                                          bytes_read: list[int]) -> None:
    p = tmp_path / "huge.json.gz"
    gzip_of_repeats(p, HEAD, b"a" * MB, 1536, TAIL)  # 1.5 GiB of one string
    assert p.stat().st_size < 4 * MB
    err = one_error(lambda: LOADERS[loader](p), p)
    assert max(bytes_read) < LIMIT + 4 * MB  # read just past the limit, not 1.5 GB
    if loader == "load_longmemeval":  # the whole-file reader names the record and field
        assert err.record == "question_id=q1 (index 0)" and err.field == "question"
    else:
        assert err.record == "index 0"


def test_a_300_mb_plain_string_stops_at_the_limit(tmp_path: Path,
                                                  bytes_read: list[int]) -> None:
    p = tmp_path / "huge.json"
    plain_of_repeats(p, HEAD, b"b" * MB, 300, TAIL)
    for loader in sorted(LOADERS):
        bytes_read.clear()
        one_error(lambda loader=loader: LOADERS[loader](p), p)
        assert max(bytes_read) < LIMIT + 4 * MB, loader


def test_a_huge_locomo_turn_stops_at_the_limit(tmp_path: Path, bytes_read: list[int]) -> None:
    p = tmp_path / "locomo.json.gz"
    head = (b'[{"sample_id": "c1", "conversation": {"speaker_a": "A", "speaker_b": "B", '
            b'"session_1_date_time": "1:00 pm on 8 May, 2023", "session_1": [{"speaker": "A",'
            b' "dia_id": "D1:1", "text": "')
    gzip_of_repeats(p, head, "é".encode() * (MB // 2), 200, b'"}]}, "qa": []}]')
    err = one_error(lambda: load_locomo(p), p)
    assert err.record == "sample_id=c1 (index 0)" and err.field.startswith("conversation")
    assert max(bytes_read) < 2 * LIMIT + 4 * MB  # two bytes per 'é'


# --------------------------------------------------------------------------- what counts
SMALL = 2**20  # the lowered limit: 1 Mi characters


@pytest.fixture()
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonio, "MAX_STRING_CHARS", SMALL)


@pytest.mark.parametrize("piece", [b"a" * 60 + b'\\"', b"a" * 60 + b'\\\\\\"'],
                         ids=["escaped-quote", "escaped-backslash-and-quote"])
def test_escaped_quotes_do_not_hide_a_huge_string(piece: bytes, small_limit: None,
                                                  tmp_path: Path,
                                                  bytes_read: list[int]) -> None:
    """``\\"`` every 60 characters of the string does not end the run the watch
    measures: it is refused once its characters pass the limit, long before the file's
    8 MiB are read."""
    p = tmp_path / "quotes.json"
    plain_of_repeats(p, HEAD, piece * (8 * SMALL // len(piece)), 1, TAIL)
    for loader in sorted(LOADERS):
        bytes_read.clear()
        one_error(lambda loader=loader: LOADERS[loader](p), p)
        assert max(bytes_read) < 3 * SMALL, loader


@pytest.mark.parametrize("cut", [1, 2], ids=["quote-opens-next-block", "backslash-ends-block"])
def test_an_escaped_quote_cut_by_a_block_edge_ends_no_run(cut: int, small_limit: None) -> None:
    """The watch judges ``\\"`` split between two blocks like one inside a block."""
    watch = _jsonio._RunWatch()
    body = b"a" * (SMALL // 2) + b'\\"'
    first, second = body[:len(body) - cut], body[len(body) - cut:] + b"a" * SMALL
    assert watch.over(b'{"q": "' + first) == 0
    assert watch.over(second) > 0  # one run of 1.5 Mi characters: over the limit
    fresh = _jsonio._RunWatch()
    assert fresh.over(b'{"q": "' + body[:-2] + b'"') == 0  # a real closing quote ends it
    assert fresh.over(b"a" * SMALL) == 0


def test_an_escape_dense_string_is_refused_by_its_byte_length(
        small_limit: None, tmp_path: Path, bytes_read: list[int]) -> None:
    """``\\n`` repeated: two bytes per character, so the watch cannot count characters from
    below; a run of more than six bytes per allowed character is still refused."""
    p = tmp_path / "escapes.json"
    plain_of_repeats(p, HEAD, b"\\n" * (4 * SMALL), 1, TAIL)  # 4 Mi characters, 8 MiB
    one_error(lambda: load_longmemeval(p), p)


def test_a_string_at_the_limit_is_read_whatever_it_holds(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """No false refusal: a string of exactly the limit's characters, made of plain letters,
    two-byte letters, four-byte characters, escapes and surrogate pairs (more bytes than
    characters, every kind; 1.5 MiB, so it crosses the readers' block edges), loads; one
    character more is refused."""
    limit = 3 << 17
    monkeypatch.setattr(_jsonio, "MAX_STRING_CHARS", limit)
    kinds = ["a", "é", "😀", "\\n", "\\\\", "\\u00e9", "\\ud83d\\ude00", '\\"']
    per = limit // len(kinds)
    text = "".join(k * per for k in kinds)
    record = json.loads(TINY_LME.read_text(encoding="utf-8"))[0]
    record["question"] = "@@"
    before, after = json.dumps([record]).encode().split(b'"@@"')
    for extra, ok in (("", True), ("z", False)):
        p = tmp_path / f"edge{extra}.json"
        p.write_bytes(before + b'"' + (text + extra).encode() + b'"' + after)
        assert p.stat().st_size > _jsonio._CHUNK
        n_chars = len(json.loads(p.read_bytes())[0]["question"])
        assert n_chars == limit + len(extra)
        for loader in sorted(LOADERS):
            if ok:
                got = LOADERS[loader](p)
                qs = got.questions if loader == "load_longmemeval" else got
                assert len(qs[0].question) == limit, loader
            else:
                with pytest.raises(InputError, match=f"{limit + 1} characters"):
                    LOADERS[loader](p)
