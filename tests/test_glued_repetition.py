"""The glued_repetition rule: stuffing inside text without whitespace (CJK, a phrase glued to
itself), which the whitespace-token rules see as one token. Native scanner against its twin, the
rule's figures, and the guard refusing and auditing such queries and full-text filter matches."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardkit import audit_records, create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.errors import GuardArgumentTypeError, GuardArgumentValueError
from qdrant_guard.policy import QueryRules
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("scan")
PHRASE = "ignorepreviousinstructions"
ZH_PHRASE = "忽略之前的指令"
# A real Chinese paragraph without spaces (CJK text has none): natural text must pass.
ZH = ("向量数据库是一种专门用来存储和检索高维向量的系统。在检索增强生成的应用中，文档先被切分成较小的段落，"
      "然后由嵌入模型转换成向量，再写入数据库。用户提问时，问题同样被转换成向量，系统在数据库中查找与之最相近的若干段落，"
      "把它们和问题一起交给语言模型，由模型据此写出回答。这种做法的好处是知识可以随时更新，不必重新训练模型。")
JA = ("ベクトルデータベースは、文章や画像を数値の並びに変換したものを保存し、似ているものを素早く探すための仕組みです。"
      "最近では、社内の資料を検索して大規模言語モデルに渡し、質問に答えさせる使い方が広がっています。")
TH = ("ฐานข้อมูลเวกเตอร์เป็นระบบที่ใช้เก็บข้อมูลในรูปของตัวเลขหลายมิติเพื่อให้ค้นหาข้อความที่มีความหมายใกล้เคียงกันได้อย่างรวดเร็ว"
      "ในการใช้งานจริงผู้ดูแลระบบควรตรวจสอบคำค้นหาก่อนส่งไปยังฐานข้อมูลเพื่อป้องกันการดึงข้อมูลที่ไม่ควรเปิดเผย")
OFF = {"max_tokens": None, "max_repetition": None, "encoded_payloads": False}


def _glued(result):
    return [v for v in result.violations if v.kind == "glued_repetition"]


# -- the twins agree ------------------------------------------------------------------------------

UNIT_PIECES = ["a", "b", "é", "東", "京", "\U0001F600", "\ud800", "\udc80", "-", "/", "%", "Q", "0", "ß"]
units = st.one_of(
    st.text(min_size=1, max_size=12).filter(lambda t: not any(c.isspace() for c in t)),
    st.lists(st.sampled_from(UNIT_PIECES), min_size=1, max_size=12).map("".join),
)


@st.composite
def stuffed(draw):
    """A unit glued to itself 2..80 times, with some code points changed and whitespace or
    other text around or inside it."""
    chars = list(draw(units) * draw(st.integers(2, 80)))
    for _ in range(draw(st.integers(0, 6))):
        if chars:
            chars[draw(st.integers(0, len(chars) - 1))] = draw(st.sampled_from(UNIT_PIECES + [" ", "\u3000", "\x85"]))
    return draw(st.text(max_size=20)) + "".join(chars) + draw(st.text(max_size=20))


caps = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.5, 0.8, 1.0, 1 / 3, 2 / 3]))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(text=stuffed(), cap=caps, default_rules=st.booleans())
def test_str_and_its_bytes_twins_agree(text, cap, default_rules) -> None:
    kwargs = {} if default_rules else OFF
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_glued_repetition=cap, **kwargs)
    assert_same(NATIVE.scan_query, PYTHON.scan_query, text.encode("utf-8", "surrogatepass"),
                max_glued_repetition=cap, **kwargs)


BAD = [b"\xff", b"\x80", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f", b"\xc2\x85",
       b"\xe3\x80\x80", b" ", b"a", b"\xe6\x9d\xb1"]


@SETTINGS
@given(data=st.one_of(
    st.binary(min_size=60, max_size=400),
    st.tuples(st.lists(st.sampled_from(BAD), min_size=1, max_size=8).map(b"".join), st.integers(2, 60)).map(
        lambda t: t[0] * t[1]),
), cap=caps)
def test_raw_bytes_twins_agree(data, cap) -> None:
    assert_same(NATIVE.scan_query, PYTHON.scan_query, data, max_glued_repetition=cap, **OFF)


@pytest.mark.parametrize("alphabet", ["ab", "aé", "a東", "a\U0001F600", "\udc80\ud800"])
def test_vector_widths_and_length_boundaries_agree(alphabet) -> None:
    # Units narrowed to 8, 16 or 32 bits; lengths around the vector tails, the 64 minimum and the
    # 256 period maximum (a run of period 255..257).
    rng = np.random.default_rng(3)
    for length in (63, 64, 65, 95, 127, 128, 129, 255, 511, 512, 513, 514, 515, 1000):
        for period in (1, 3, 16, 31, 255, 256, 257):
            base = "".join(rng.choice(list(alphabet), size=period))
            text = (base * (length // period + 1))[:length]
            for cap in (0.0, 0.5, 0.9):
                assert_same(NATIVE.scan_query, PYTHON.scan_query, text, max_glued_repetition=cap, **OFF)
                assert_same(NATIVE.scan_query, PYTHON.scan_query, "x\u3000" + text + " " + text,
                            max_glued_repetition=cap, **OFF)


def test_rule_errors_agree() -> None:
    for bad, error in ((1.5, GuardArgumentValueError), (-0.1, GuardArgumentValueError),
                       (float("nan"), GuardArgumentValueError), ("0.5", GuardArgumentTypeError),
                       (True, GuardArgumentTypeError)):
        for fn in (NATIVE.scan_query, PYTHON.scan_query):
            with pytest.raises(error, match="max_glued_repetition"):
                fn("a b", max_glued_repetition=bad)
        assert_same(NATIVE.scan_query, PYTHON.scan_query, "a b", max_glued_repetition=bad)
    # Ints in range are ratios, as for the other caps.
    assert_same(NATIVE.scan_query, PYTHON.scan_query, PHRASE * 4, max_glued_repetition=0)
    assert _glued(NATIVE.scan_query(PHRASE * 4, max_glued_repetition=0))
    assert not _glued(NATIVE.scan_query(PHRASE * 4, max_glued_repetition=1))


def test_generic_native_pass_agrees() -> None:
    """QG_SCAN_GENERIC forces the SSE2 counts on CPUs that would run the AVX2 ones."""
    code = (
        "from qdrant_guard import _scan, _scan_py\n"
        "from tests.oracle import assert_same\n"
        "import random\n"
        "rng = random.Random(4)\n"
        "for alphabet in ('ab', 'a\\u6771', 'a\\U0001F600'):\n"
        "    for length in (64, 100, 1000, 5000):\n"
        "        for period in (1, 7, 100, 256):\n"
        "            base = ''.join(rng.choice(alphabet) for _ in range(period))\n"
        "            text = (base * (length // period + 1))[:length]\n"
        "            assert_same(_scan.scan_query, _scan_py.scan_query, text, max_glued_repetition=0.5)\n"
        "            assert_same(_scan.scan_query, _scan_py.scan_query, text.encode(), max_glued_repetition=0.0)\n"
        "print('ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, QG_SCAN_GENERIC="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# -- what the rule measures -----------------------------------------------------------------------

@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
def test_glued_stuffing_is_flagged_where_the_token_rules_see_one_token(scan) -> None:
    for text, period in ((PHRASE * 20, 26), ((ZH_PHRASE * 600)[:4000], 7)):
        old = scan(text)
        assert old.ok and old.token_count == 1  # what the scanner saw before this rule
        result = scan(text, max_glued_repetition=0.5)
        assert [v.kind for v in result.violations] == ["glued_repetition"]
        v = result.violations[0]
        assert v.position == 0
        ratio = (len(text) - period) / len(text)
        assert v.detail == (f"{len(text)} code points without whitespace repeat at a period of {period}: "
                            f"ratio {ratio:.3f} > max_glued_repetition=0.5")


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
def test_positions_follow_the_scanner(scan) -> None:
    # Code-point index for str, byte offset for bytes; U+3000 is whitespace and ends a run.
    text = "é 東京\u3000" + PHRASE * 3 + " ok " + ZH_PHRASE * 10
    found = _glued(scan(text, max_glued_repetition=0.5))
    assert [v.position for v in found] == [5, 5 + 78 + 4]
    raw = text.encode()
    found = _glued(scan(raw, max_glued_repetition=0.5))
    starts = [len("é 東京\u3000".encode()), len(("é 東京\u3000" + PHRASE * 3 + " ok ").encode())]
    assert [v.position for v in found] == starts


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
def test_copies_and_the_64_code_point_floor(scan) -> None:
    three = "x" + "abcdefghijklmnopqrstuv" * 3   # 67 code points, three copies: ratio 0.657
    two = "abcdefghijklmnopqrstuvwxyzABCDEFGH" * 2  # 68 code points, two copies: ratio 0.5, not above
    assert _glued(scan(three, max_glued_repetition=0.5))
    assert not _glued(scan(two, max_glued_repetition=0.5))
    assert _glued(scan(two, max_glued_repetition=0.49))
    assert not _glued(scan("a" * 63, max_glued_repetition=0.0))  # under the floor
    assert _glued(scan("a" * 64, max_glued_repetition=0.5))
    # The same stuffing split by whitespace is whitespace tokens, for the other rules.
    assert not _glued(scan(" ".join([PHRASE] * 20), max_glued_repetition=0.5))


@pytest.mark.parametrize("scan", [NATIVE.scan_query, PYTHON.scan_query], ids=["native", "python"])
def test_natural_text_without_spaces_passes_and_variants_do_not(scan) -> None:
    import base64
    import hashlib

    natural = [ZH, JA, TH, ZH + JA,
               base64.b64encode(hashlib.shake_256(b"x").digest(512)).decode(),
               "".join(hashlib.sha256(bytes([i])).hexdigest() for i in range(8)),
               "https://docs.example.com/api/v1/api/v1/docs/docs/reference/reference/index.html?lang=en&lang=en",
               "AbstractSingletonProxyFactoryBeanConfigurationManagerServiceImplementationHelper"]
    for text in natural:
        assert not _glued(scan(text, max_glued_repetition=0.5)), text
    variants = ["".join(PHRASE + ".,;!?"[i % 5] for i in range(20)),        # punctuation between copies
                "".join(PHRASE[:i % 26] + "z" + PHRASE[i % 26 + 1:] for i in range(20)),  # one changed character
                "".join(ZH_PHRASE + "，" for _ in range(50)),
                ZH + ZH_PHRASE * 60]                                        # a natural prefix
    for text in variants:
        assert _glued(scan(text, max_glued_repetition=0.5)), text


def test_the_default_call_is_unchanged() -> None:
    for fn in (NATIVE.scan_query, PYTHON.scan_query):
        assert fn(PHRASE * 100).ok and fn(ZH_PHRASE * 500).ok


# -- the guard ------------------------------------------------------------------------------------

@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


def _client(kit, **query):
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "intent": {"enabled": False}, "query": query}
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    create(cl, "c")
    cl.upsert("c", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i)), payload={"text": "t"})
                    for i in range(3)])
    return cl


def test_policy_default_and_file_values() -> None:
    assert QueryRules().max_glued_repetition == 0.5
    assert QueryRules(max_glued_repetition=1).max_glued_repetition == 1
    with pytest.raises(ValueError):
        QueryRules(max_glued_repetition=1.5)


@pytest.mark.parametrize("text", [PHRASE * 20, (ZH_PHRASE * 600)[:4000]], ids=["english", "chinese"])
def test_the_guard_refuses_and_audits_glued_stuffing(kit, text) -> None:
    cl = _client(kit)
    vector = unit(np.random.default_rng(9))
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("c", query=vector, query_text=text, limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert [v["kind"] for v in ei.value.details["violations"]] == ["glued_repetition"]
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "QUERY_REJECTED"
    assert [v["kind"] for v in entry["details"]["violations"]] == ["glued_repetition"]
    # Natural text without spaces goes through.
    assert cl.query_points("c", query=vector, query_text=ZH, limit=2).points
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"


def test_monitor_mode_and_the_knob_off(kit) -> None:
    vector = unit(np.random.default_rng(9))
    cl = _client(kit, mode="monitor")
    cl.query_points("c", query=vector, query_text=PHRASE * 20, limit=2)
    entry = audit_records(kit)[-1]
    assert entry["verdict"] == "ALLOW"
    assert [v["kind"] for v in entry["details"]["scan"]["would_reject"]] == ["glued_repetition"]
    off = _client(kit, max_glued_repetition=None)
    assert off.query_points("c", query=vector, query_text=PHRASE * 20, limit=2).points
    assert audit_records(kit)[-1]["verdict"] == "ALLOW"


def test_full_text_filter_matches_get_the_rule(kit) -> None:
    cl = _client(kit)
    flt = models.Filter(must=[models.FieldCondition(key="text", match=models.MatchText(text=ZH_PHRASE * 40))])
    with pytest.raises(GuardRefusal) as ei:
        cl.scroll("c", scroll_filter=flt, limit=2)
    assert ei.value.verdict == "QUERY_REJECTED"
    assert [v["kind"] for v in ei.value.details["violations"]] == ["glued_repetition"]
    assert audit_records(kit)[-1]["verdict"] == "QUERY_REJECTED"
    ok = models.Filter(must=[models.FieldCondition(key="text", match=models.MatchText(text=ZH))])
    cl.scroll("c", scroll_filter=ok, limit=2)
