"""Detector gaps, fourth round: vendors' tokens the threat model listed as missed when pasted alone
(Shopify, DigitalOcean, Mailgun, Databricks, Postman).

Every case runs on both twins (native and the pure-Python reference) and they must agree.
"""
from __future__ import annotations

import random
import string

import pytest

from qdrant_guard import _detect, _detect_py
from qdrant_guard.detect import find_sensitive, redact

TWINS = [pytest.param(_detect, id="native"), pytest.param(_detect_py, id="python")]

HEX32 = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"
SHOPIFY = "shpat_" + HEX32
SHOPIFY_SS = "shpss_" + HEX32[::-1]
DO = "dop_v1_" + HEX32 + HEX32[::-1]
DO_OAUTH = "doo_v1_" + HEX32[::-1] + HEX32
MAILGUN = "key-" + HEX32
DATABRICKS = "dapi" + HEX32
DATABRICKS_2 = DATABRICKS + "-2"
POSTMAN = "PMAK-" + HEX32[:24] + "-" + HEX32 + "7e"

TOKENS = [
    (SHOPIFY, "SHOPIFY_TOKEN"),
    (SHOPIFY_SS, "SHOPIFY_TOKEN"),
    ("shpca_" + HEX32, "SHOPIFY_TOKEN"),
    ("shppa_" + HEX32, "SHOPIFY_TOKEN"),
    (DO, "DIGITALOCEAN_TOKEN"),
    (DO_OAUTH, "DIGITALOCEAN_TOKEN"),
    ("dor_v1_" + HEX32 * 2, "DIGITALOCEAN_TOKEN"),
    (MAILGUN, "MAILGUN_KEY"),
    (DATABRICKS, "DATABRICKS_TOKEN"),
    (DATABRICKS_2, "DATABRICKS_TOKEN"),
    (POSTMAN, "POSTMAN_KEY"),
]


def test_shapes_of_the_fixtures() -> None:
    assert len(SHOPIFY) == 38 and len(DO) == 71 and len(MAILGUN) == 36 and len(DATABRICKS) == 36
    assert [len(p) for p in POSTMAN.split("-")] == [4, 24, 34]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("token,type_", TOKENS, ids=[t[:8] for t, _ in TOKENS])
@pytest.mark.parametrize("template", ["{}", "key {} here", "x='{}'", '"{}",', "({})", "v: {}\n", "<{}>", "see {}.",
                                      "TOKEN={}", "Authorization: Bearer {}"])
def test_a_vendor_token_is_found_alone(kernel, token: str, type_: str, template: str) -> None:
    text = template.format(token)
    s = text.index(token)
    assert kernel.find_spans(text) == [(s, s + len(token), type_, "format")]


@pytest.mark.parametrize("token,type_", TOKENS, ids=[t[:8] for t, _ in TOKENS])
def test_placeholder_and_category(token: str, type_: str) -> None:
    assert redact(f"use {token} now") == f"use [{type_}] now"
    assert [f.category for f in find_sensitive(token)] == ["CREDENTIAL"]


@pytest.mark.parametrize("kernel", TWINS)
def test_a_token_assigned_to_a_secret_name_is_one_finding_of_its_own_type(kernel) -> None:
    for token, type_ in TOKENS:
        for text in (f'SHOPIFY_ACCESS_TOKEN="{token}"', f"password = {token}", f"api_key: {token}"):
            s = text.index(token)
            assert kernel.find_spans(text) == [(s, s + len(token), type_, "format")], text


@pytest.mark.parametrize("kernel", TWINS)
def test_underscore_wrapping_of_alphanumeric_bodies(kernel) -> None:
    # As for ghp_ and npm_ tokens: "_" (Markdown emphasis) around the token does not hide it.
    for token, type_ in ((SHOPIFY, "SHOPIFY_TOKEN"), (DO, "DIGITALOCEAN_TOKEN"), (DATABRICKS, "DATABRICKS_TOKEN")):
        assert kernel.find_spans(f"_{token}_") == [(1, 1 + len(token), type_, "format")]


# Shapes that come near a token but are not one: inside a longer token, one character short or
# long, the wrong alphabet (upper case, non-hex, all digits, all letters), a name that starts
# with the prefix.
NEAR_MISSES = [
    "x" + SHOPIFY, "9" + SHOPIFY, SHOPIFY + "0", SHOPIFY + "a", SHOPIFY[:-1], "shpat_" + HEX32.upper(),
    "shpat_" + HEX32[:-1] + "g", "shpat_" + "0123456789" * 3 + "01", "shpat_" + "abcdef" * 5 + "ab",
    "shpxx_" + HEX32, "shpat-" + HEX32, "SHPAT_" + HEX32, "shpat_access_token", "shp_" + HEX32,
    "x" + DO, "9" + DO, DO + "0", DO[:-1], "dop_v2_" + HEX32 * 2, "dop_v1_" + HEX32.upper() * 2,
    "dox_v1_" + HEX32 * 2, "dop_v1_" + "0123456789abcdef" * 4 + "g", "dop_v1_" + "1234567890" * 6 + "1234",
    "x" + MAILGUN, "9" + MAILGUN, "_" + MAILGUN, "-" + MAILGUN, "." + MAILGUN, "monkey-" + HEX32, "api_key-" + HEX32,
    "cache.key-" + HEX32, MAILGUN + "0", MAILGUN + "-v2", MAILGUN + "_x", MAILGUN + ".json", MAILGUN[:-1],
    "key-" + HEX32.upper(), "key-" + "0123456789" * 3 + "01", "key-" + "abcdef" * 5 + "ab",
    "key-3ax6xnjp29jd6fds4gc373sgvjxteol0", "Key-" + HEX32, "key_" + HEX32, "key-value-store",
    "x" + DATABRICKS, "9" + DATABRICKS, DATABRICKS + "0", DATABRICKS[:-1], DATABRICKS + "-x",
    DATABRICKS + "-123", DATABRICKS + "-2a", DATABRICKS + "-2-", "dapi" + HEX32.upper(), "Dapi" + HEX32,
    "dapi_" + HEX32, "dapi" + "1234567890" * 3 + "12", "dapi_version = 2", "rapidapi" + HEX32,
    "x" + POSTMAN, "-" + POSTMAN, "9" + POSTMAN, POSTMAN + "0", POSTMAN + "-", POSTMAN + "-x", POSTMAN[:-1],
    "PMAK-" + HEX32[:23] + "-" + HEX32 + "7e0", "PMAK-" + HEX32[:24] + "_" + HEX32 + "7e", POSTMAN.upper(),
    "pmak-" + POSTMAN[5:], "PMAK-" + "1234567890" * 2 + "1234-" + HEX32 + "7e",
    # 32 hex digits after a word are a digest, not a key: no vendor prefix, no finding
    "md5 " + HEX32, "etag " + HEX32,
]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_no_token(kernel, text: str) -> None:
    for context in ("{}", "a {} b", "'{}'"):
        found = kernel.find_spans(context.format(text))
        assert not found, (text, found)


_ALPHABETS = ["0123456789abcdef", "0123456789abcdef", "0123456789", "abcdef", "0123456789ABCDEF",
              string.ascii_letters + string.digits, "ab1_-.X"]
_PREFIXES = ["shpat_", "shpca_", "shppa_", "shpss_", "shpxx_", "dop_v1_", "doo_v1_", "dor_v1_", "key-", "dapi",
             "PMAK-", "PMAK-" + HEX32[:24] + "-"]


def _near_token(rng: random.Random) -> str:
    prefix = rng.choice(_PREFIXES)
    alphabet = rng.choice(_ALPHABETS)
    n = rng.choice([rng.randint(0, 80), 23, 24, 31, 32, 32, 33, 34, 35, 63, 64, 64, 65])
    body = "".join(rng.choice(alphabet) for _ in range(n))
    if prefix == "PMAK-" and rng.random() < 0.7:
        body = body[:24] + "-" + body[25:]
    before = rng.choice(["", " ", "x", "_", "-", ".", "=", "'", "9", "é", ":"])
    after = rng.choice(["", " ", "x", "_", "-", ".", ".x", "'", "9", "é", "-2", "-12", "-123", "-2x", "@h"])
    return before + prefix + body + after


def test_the_twins_agree_on_near_tokens() -> None:
    rng = random.Random(20261204)
    for _ in range(4000):
        text = " ".join(_near_token(rng) for _ in range(rng.randint(1, 3)))
        assert _detect.find_spans(text) == _detect_py.find_spans(text), text
