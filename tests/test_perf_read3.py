"""The third round of read-path shortcuts, each against the general code it skips: the cached
query-noise key and row-key HMAC state against fresh HMACs, and the reused C JSON encoder
against JSONEncoder.encode and the general encoder."""
from __future__ import annotations

import math

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes, hmac
from hypothesis import given, settings
from hypothesis import strategies as st

from qdrant_guard import canonical as _canonical
from qdrant_guard import noise as _noise


def _fresh_query_key(key: bytes) -> bytes:
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(_noise._QUERY_KEY_LABEL)
    return h.finalize()


def _fresh_row_keys(rows: np.ndarray, key: bytes, prefix: bytes) -> bytes:
    out = []
    for row in rows:
        h = hmac.HMAC(key, hashes.SHA256())
        h.update(prefix)
        h.update(row.tobytes())
        out.append(h.finalize())
    return b"".join(out)


def test_query_noise_key_cache_matches_fresh_hmac():
    keys = [bytes([i]) * 32 for i in range(4)] + [bytes(range(40)), b"k" * 33]
    # The same key object again (a hit), an equal key in another object, and alternating keys.
    order = [0, 0, 1, 0, 2, 2, 3, 4, 5, 4, 0]
    for i in order:
        key = keys[i]
        assert _noise.query_noise_key(key) == _fresh_query_key(key)
        copy = bytes(bytearray(key))
        assert copy is not key
        assert _noise.query_noise_key(copy) == _fresh_query_key(key)
        assert _noise.query_noise_key(key) == _fresh_query_key(key)


def test_query_noise_key_still_checks_after_a_hit():
    good = b"g" * 32
    _noise.query_noise_key(good)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        _noise.query_noise_key(b"short")
    with pytest.raises(TypeError, match="key must be bytes"):
        _noise.query_noise_key(bytearray(good))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key must be bytes"):
        _noise.query_noise_key(None)  # type: ignore[arg-type]
    assert _noise.query_noise_key(good) == _fresh_query_key(good)


def test_row_keys_cache_matches_fresh_hmac():
    rng = np.random.default_rng(7)
    keys = [b"a" * 32, b"b" * 48, bytes(range(32))]
    prefixes = [b"qg-noise-row|x|", b"qg-noise-row|y|", b""]
    for step in range(40):
        key = keys[step % 3] if step % 5 else bytes(bytearray(keys[0]))
        prefix = prefixes[(step // 3) % 3]
        rows = rng.standard_normal((1 + step % 4, 3 + step % 5)).astype(np.float32 if step % 2 else np.float64)
        assert _noise._row_keys(rows, key, prefix) == _fresh_row_keys(rows, key, prefix)
        # Twice: the second call reads the kept state.
        assert _noise._row_keys(rows, key, prefix) == _fresh_row_keys(rows, key, prefix)
        # The same key object under each prefix in turn, and each prefix under another key.
        for other in prefixes:
            assert _noise._row_keys(rows, key, other) == _fresh_row_keys(rows, key, other)
        for other in keys:
            assert _noise._row_keys(rows, other, prefix) == _fresh_row_keys(rows, other, prefix)


def test_keyed_release_unchanged_by_the_cache():
    rng = np.random.default_rng(11)
    key = b"z" * 32
    for i in range(6):
        v = rng.standard_normal((1 + i % 2, 16))
        kw = dict(mechanism="gaussian", epsilon=1.0 + i, radius=0.1, delta=1e-6, clip_norm=None, key=key)
        _noise._ROW_BASE = None
        cold, p1 = _noise.privatize(v, **kw)
        warm, p2 = _noise.privatize(v, **kw)
        assert p1 == p2
        assert np.array_equal(cold, warm)


_leaf = st.none() | st.booleans() | st.integers(-(10 ** 40), 10 ** 40) | st.text(max_size=12) | st.floats(
    allow_nan=False, allow_infinity=False)
_plain = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_plain)
def test_reused_c_encoder_matches_json_encoder_and_general_path(obj):
    assert _canonical._dumps(obj) == _canonical._fast_dumps(obj)
    out: list[str] = []
    _canonical._encode(obj, out, "$")
    assert _canonical.canonical_json(obj) == "".join(out).encode("utf-8")


def test_reused_c_encoder_is_in_use_and_raises_as_before():
    assert _canonical._dumps is not _canonical._fast_dumps  # CPython has the C encoder
    for bad in ({"a": math.nan}, [1, {"b": math.inf}]):
        with pytest.raises(ValueError) as new:
            _canonical._dumps(bad)
        with pytest.raises(ValueError) as old:
            _canonical._fast_dumps(bad)
        assert str(new.value) == str(old.value)
    with pytest.raises(ValueError, match="NaN and Infinity"):
        _canonical.canonical_json({"a": [math.nan]})
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    out: list[str] = []
    with pytest.raises(RecursionError):
        _canonical._encode(deep, out, "$")
    with pytest.raises(RecursionError):
        _canonical.canonical_json(deep)


# -- decision records ------------------------------------------------------------------------
def _old_utf8_safe(text):
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _old_jsonable(obj):
    import enum

    if isinstance(obj, dict):
        return {str(k): _old_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_old_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else str(obj)
    if isinstance(obj, str):
        return _old_utf8_safe(obj)
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    return str(obj)


class _Str(str):
    pass


class _LoudStr(str):
    def encode(self, encoding="utf-8", errors="strict"):  # must not take the ASCII path
        if errors == "strict":
            raise UnicodeEncodeError("utf-8", "x", 0, 1, "refused")
        return str.encode(self, encoding, errors).upper()


class _Int(int):
    pass


def _same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b or (a != a and b != b), (a, b)


def test_jsonable_fast_paths_match_the_general_checks():
    import enum

    from qdrant_guard import decision as _decision
    from qdrant_guard.decision import Verdict

    class Color(enum.Enum):
        RED = "red"

    values = ["", "ascii", "é", "\ud800 lone", _Str("sub"), _Str("\udfff"), _LoudStr("abc"), 0, -5, 2 ** 70,
              True, False, None, _Int(3), 1.5, math.nan, math.inf, -math.inf, -0.0, Verdict.ALLOW, Color.RED,
              b"bytes", object, (1, "a"), {3, 4}, frozenset({"x"}), [1, [2, ["\ud83d"]]],
              {"k": {"n": [None, True, 1.0]}, 1: "int key", _Str("s"): 2}, np.float64(2.5), np.int64(4)]
    for v in values:
        _same(_decision._jsonable(v), _old_jsonable(v))
        _same(_decision._jsonable({"wrapped": [v, {"in": v}]}), _old_jsonable({"wrapped": [v, {"in": v}]}))
    for text in ["", "plain", "é", "\ud800", _Str("a"), _Str("\ud800"), _LoudStr("abc")]:
        _same(_decision._utf8_safe(text), _old_utf8_safe(text))
