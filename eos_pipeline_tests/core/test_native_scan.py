"""The native path's byte scan (:func:`native_payload`) against its rules spelled plainly.

The scan looks at each block of the chunk once: at the control bytes, then at what follows each
colon. A colon's next bytes may lie in the next block, so the property runs with blocks of a few
bytes too, where every edge is crossed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eos_pipeline.core import decode
from eos_pipeline.core.decode import lines_framed, native_payload

PIECES = [b'"', b":", b" ", b"{", b"}", b"a", b"1", b"\\", b"\n", b"\t", b",", b"\xc3\xa9", b"\xff"]


def expected(values: list[bytes]) -> int | None:
    """The rules of :func:`native_payload`, one plain statement each."""
    data = b"\n".join(values)
    if not lines_framed(values, data):
        return None
    if sum(b < 0x20 for b in data) != len(values) - 1:
        return None  # a control byte besides the joins
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if b"\\" in data and (decode._BAD_ESCAPE.search(data) or decode.unpaired_surrogate(data)):
        return None
    if b":  " in data:
        return None  # a value after two spaces
    return data.count(b':"') + data.count(b': "')


values_strategy = st.lists(
    st.lists(st.sampled_from(PIECES), max_size=14).map(lambda p: b"{" + b"".join(p) + b"}"),
    min_size=1,
    max_size=5,
)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 1 << 20])
@settings(max_examples=400, deadline=None)
@given(values=values_strategy)
def test_the_scan_gives_the_plain_rules_verdict_and_count(values: list[bytes], block: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "_BLOCK", block)
        payload = native_payload(values, b"\n".join(values))

    assert (None if payload is None else payload.quoted) == expected(values)


def test_a_spaced_chunk_counts_both_spellings() -> None:
    values = [b'{"a": "x","b":"y","n": 1}', b'{"a":"z","b": "w","n":2}']

    payload = native_payload(values, b"\n".join(values))

    assert payload is not None and payload.quoted == 4
