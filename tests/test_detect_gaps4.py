"""Detector gaps, fourth round: vendors' tokens the threat model listed as missed when pasted alone
(Shopify, DigitalOcean, Mailgun, Databricks, Postman, Linear, Doppler, Slack app-level tokens, Azure
storage account keys in a connection string).

Every case runs on both twins (native and the pure-Python reference) and they must agree.
"""
from __future__ import annotations

import base64
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
LINEAR = "lin_api_Ab3dEf7hIj9kLmN0pQrStUvWxYz1234567890abc"
DOPPLER = "dp.pt.bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi"
DOPPLER_SERVICE = "dp.st.dev.bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi"
XAPP = "xapp-1-A0123ABCDEF-1234567890123-" + HEX32 + HEX32[::-1]
# base64 of 64 bytes, as Azure storage account keys are.
AZURE_KEY = "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/QEFCQ0RFRg=="
AZURE = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net"

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
    (LINEAR, "LINEAR_KEY"),
    (LINEAR.lower(), "LINEAR_KEY"),
    (DOPPLER, "DOPPLER_TOKEN"),
    (DOPPLER_SERVICE, "DOPPLER_TOKEN"),
    ("dp.st." + DOPPLER[6:], "DOPPLER_TOKEN"),
    ("dp.ct." + DOPPLER[6:-2], "DOPPLER_TOKEN"),
    ("dp.sa." + DOPPLER[6:], "DOPPLER_TOKEN"),
    ("dp.said." + DOPPLER[6:], "DOPPLER_TOKEN"),
    ("dp.scim." + DOPPLER[6:], "DOPPLER_TOKEN"),
    ("dp.audit." + DOPPLER[6:] + "a", "DOPPLER_TOKEN"),
    (XAPP, "SLACK_TOKEN"),
]


def test_shapes_of_the_fixtures() -> None:
    assert len(SHOPIFY) == 38 and len(DO) == 71 and len(MAILGUN) == 36 and len(DATABRICKS) == 36
    assert len(LINEAR) == 48 and len(DOPPLER) == 49 and len(AZURE_KEY) == 88
    assert base64.b64decode(AZURE_KEY, validate=True) == bytes(range(7, 71))
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


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("template", ["{}", "{}\n", "conn = '{}'", '"AzureWebJobsStorage": "{}",', "AZURE_STORAGE_CONNECTION_STRING={}",
                                      "BlobEndpoint=https://acct.blob.core.windows.net/;AccountName=acct;AccountKey={}"])
def test_an_azure_storage_key_in_a_connection_string(kernel, template: str) -> None:
    # Only the key is the secret: the account name and endpoints around it stay readable.
    for conn in (AZURE, f"AccountKey={AZURE_KEY}", f"AccountName=acct;AccountKey={AZURE_KEY}"):
        text = template.format(conn.split("AccountKey=")[1] if template.endswith("AccountKey={}") else conn)
        s = text.index(AZURE_KEY)
        assert kernel.find_spans(text) == [(s, s + 88, "AZURE_STORAGE_KEY", "format")], text


def test_azure_placeholder() -> None:
    assert redact(AZURE) == AZURE.replace(AZURE_KEY, "[AZURE_STORAGE_KEY]")
    assert [f.category for f in find_sensitive(AZURE)] == ["CREDENTIAL"]


AZURE_NEAR_MISSES = [
    "AccountKey=" + AZURE_KEY[:-3] + "==",  # 85 characters
    "AccountKey=" + AZURE_KEY[:-2] + "a==",  # 87
    "AccountKey=" + AZURE_KEY[:-2],  # no padding
    "AccountKey=" + AZURE_KEY + "=",
    "AccountKey=" + AZURE_KEY + "a",
    "AccountKey=" + AZURE_KEY[:85] + "B==",  # a last character no 64-byte key ends with
    "AccountKey=" + "A" * 86 + "==",
    "AccountKey=" + "abcdefgh" * 10 + "abcdeg==",  # no capital, no digit
    "xAccountKey=" + AZURE_KEY,
    "accountkey=" + AZURE_KEY,
    "AccountKey = " + AZURE_KEY[:40],
]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("text", AZURE_NEAR_MISSES)
def test_azure_near_misses_are_no_azure_key(kernel, text: str) -> None:
    # A generic-secret finding may remain (the value sits under a "key" name); it is never typed
    # as an Azure key.
    assert "AZURE_STORAGE_KEY" not in [t for _, _, t, _ in kernel.find_spans(text)]
    assert "AZURE_STORAGE_KEY" not in [t for _, _, t, _ in kernel.find_spans("my " + AZURE_KEY + " here")]


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
    "x" + LINEAR, "9" + LINEAR, LINEAR + "0", LINEAR[:-1], "lin_api_" + "abcdefghij" * 4, "lin_api_" + "1234567890" * 4,
    "lin_api_key", "lin_api_version_2024_01_15_preview_release_x", "lin-api-" + LINEAR[8:], "LIN_API_" + LINEAR[8:],
    "x" + DOPPLER, "-" + DOPPLER, "a." + DOPPLER, DOPPLER + "xy", DOPPLER + "-", DOPPLER + "_", DOPPLER + ".x",
    DOPPLER[:45], DOPPLER + "abcd", "dp.xx." + DOPPLER[6:], "dp.pt.dev." + DOPPLER[6:], "dp.pt." + "a" * 42,
    "dp.pt." + "abcdefghij" * 4 + "ab", "dp.pt.foo", "df.dp.pt.bar", "dp.st.DEV." + DOPPLER[6:], "DP.PT." + DOPPLER[6:],
    "x" + XAPP, "-" + XAPP, XAPP + "0", XAPP + "-", XAPP[:-1], XAPP.replace("xapp-1-", "xapp-12-"),
    XAPP.replace("A0123ABCDEF", "a0123abcdef"), XAPP.replace("-1234567890123-", "-12345678901x3-"),
    XAPP[:-64] + HEX32.upper() * 2, "xapp-1-A0123ABCDEF-1234567890123-deadbeef", "xapp-config-v2",
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
              string.ascii_letters + string.digits, string.ascii_letters + string.digits, "ab1_-.X",
              string.ascii_letters + string.digits + "+/"]
_PREFIXES = ["lin_api_", "dp.pt.", "dp.st.", "dp.st.dev.", "dp.audit.", "xapp-1-A0123ABCDEF-1234567890123-",
             "AccountKey=", "AccountName=a;AccountKey=", "shpat_", "shpca_", "shppa_", "shpss_", "shpxx_", "dop_v1_", "doo_v1_", "dor_v1_", "key-", "dapi",
             "PMAK-", "PMAK-" + HEX32[:24] + "-"]


def _near_token(rng: random.Random) -> str:
    prefix = rng.choice(_PREFIXES)
    alphabet = rng.choice(_ALPHABETS)
    n = rng.choice([rng.randint(0, 80), 23, 24, 31, 32, 32, 33, 34, 35, 39, 40, 41, 43, 44, 45, 63, 64, 64, 65, 86])
    body = "".join(rng.choice(alphabet) for _ in range(n))
    if prefix.endswith("AccountKey=") and rng.random() < 0.7:
        body = body[:85] + rng.choice("AQgwB") + rng.choice(["==", "=", "===", ""])
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
