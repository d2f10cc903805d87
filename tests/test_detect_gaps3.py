"""Detector gaps, third round: prefixed tokens it did not know (Google API keys and OAuth client
secrets, npm, PyPI, SendGrid, Twilio, Hugging Face; Anthropic keys were typed OPENAI_KEY).

Every case runs on both twins (native and the pure-Python reference) and they must agree.
"""
from __future__ import annotations

import random
import string

import pytest

from qdrant_guard import _detect, _detect_py
from qdrant_guard.detect import find_sensitive, redact

TWINS = [pytest.param(_detect, id="native"), pytest.param(_detect_py, id="python")]

GOOGLE = "AIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6q"
OAUTH = "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"
NPM = "npm_Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789"
PYPI = "pypi-AgEIcHlwaS5vcmcCJGE0ZjM3YjM0LWQ5ZWQtNGQ0Mi1hY2YyLTk1Y2ZhNGM4NmE4NgACKlszLCI0ZjZkMjU2ZS1kMGI3"
TEST_PYPI = "pypi-AgENdGVzdC5weXBpLm9yZwIkYjM0LWQ5ZWQtNGQ0Mi1hY2YyLTk1Y2ZhNGM4NmE4NgACKlszLCI0ZjZkMjU2ZS1k"
SENDGRID = "SG.Ab3dEf7hIj9kLmN0pQ_rSt.Uv-WxYz123456789Ab3dEf7hIj9kLmN0pQrStUvWxYz"
TWILIO = "SK2f9c0e4b7d1a8f3e6c5b2a9d8e7f6a5b"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
ANTHROPIC = "sk-ant-api03-" + "Ab3dEf7hIj9kLmN0pQrStUvWxYz12345678_-" * 2 + "Ab3dEf7hIj9kLmN0pQrStUAA"

TOKENS = [
    (GOOGLE, "GOOGLE_API_KEY"),
    (OAUTH, "GOOGLE_OAUTH_SECRET"),
    (NPM, "NPM_TOKEN"),
    (PYPI, "PYPI_TOKEN"),
    (TEST_PYPI, "PYPI_TOKEN"),
    (SENDGRID, "SENDGRID_KEY"),
    (TWILIO, "TWILIO_KEY"),
    (HF, "HUGGINGFACE_TOKEN"),
    (ANTHROPIC, "ANTHROPIC_KEY"),
]


def test_shapes_of_the_fixtures() -> None:
    assert len(GOOGLE) == 39 and len(OAUTH) == 35 and len(NPM) == 40 and len(TWILIO) == 34 and len(HF) == 37
    assert [len(p) for p in SENDGRID.split(".")] == [2, 22, 43]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("token,type_", TOKENS, ids=[t for _, t in TOKENS])
@pytest.mark.parametrize("template", ["{}", "key {} here", "x='{}'", '"{}",', "({})", "v: {}\n", "<{}>", "see {}."])
def test_a_prefixed_token_is_found_alone(kernel, token: str, type_: str, template: str) -> None:
    text = template.format(token)
    s = text.index(token)
    assert kernel.find_spans(text) == [(s, s + len(token), type_, "format")]


@pytest.mark.parametrize("token,type_", TOKENS, ids=[t for _, t in TOKENS])
def test_placeholder_and_category(token: str, type_: str) -> None:
    assert redact(f"use {token} now") == f"use [{type_}] now"
    assert [f.category for f in find_sensitive(token)] == ["CREDENTIAL"]


# Shapes that come near a token but are not one: inside a longer token, one character short or
# long, the wrong alphabet, an identifier that starts with the prefix.
NEAR_MISSES = [
    "x" + GOOGLE, "9" + GOOGLE, "-" + GOOGLE, GOOGLE + "x", GOOGLE + "-", GOOGLE + "_", GOOGLE[:-1],
    GOOGLE.replace("AIza", "AIzb"), GOOGLE[:20] + "." + GOOGLE[21:], "aIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6q",
    "x" + OAUTH, OAUTH + "x", OAUTH + "-", OAUTH[:-1], OAUTH.replace("GOCSPX", "GOCSPY"),
    "x" + NPM, "9" + NPM, NPM + "x", NPM[:-1], NPM.lower(), "npm_" + "abcdefghij" * 3 + "abcdef",
    "npm_config_cache=/tmp/.npm", "npm_package_version", NPM.replace("_", "-"),
    "x" + PYPI, "-" + PYPI, PYPI[:69], "pypi-AgEIcHlwaS5vcmX" + PYPI[20:], "pypi-" + PYPI[5:].lower(),
    "pypi-simple-index-mirror", "https://pypi-mirror.internal/simple",
    "x" + SENDGRID, "a." + SENDGRID, "-" + SENDGRID, SENDGRID + "x", SENDGRID + ".x", SENDGRID[:-1],
    SENDGRID.replace(".U", "U", 1), "SG." + SENDGRID[3:25] + SENDGRID[26:], "SG.Widget.Button",
    "x" + TWILIO, "9" + TWILIO, TWILIO + "0", TWILIO[:-1], "SK" + "0123456789" * 3 + "01",
    "SK" + "abcdef" * 5 + "ab", "SK" + TWILIO[2:-1] + "g", "sk" + TWILIO[2:], "SKU 1234-5678",
    "x" + HF, "9" + HF, HF + "a", HF + "1", HF[:-1], "hf_" + HF[3:-1] + "1", "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",
    "hf_" + "abcdefghijklmnopqrstuvwxyzabcdefgh", "hf_" + "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGH",
    "hf_" + "AbcdefghijKlmnopqrstUvwxyzabcdeFGH", "hf_hub_download(repo_id='gpt2')",
    # the documented-example filter every prefixed token shares
    "AIzaSyEXAMPLEb2C3d4E5f6G7h8I9j0K_L-m3N4o", "npm_EXAMPLE3dEf7hIj9kLmN0pQrStUvWxYz1234",
    "SG.EXAMPLEf7hIj9kLmN0pQ_rSt.Uv-WxYz123456789Ab3dEf7hIj9kLmN0pQrStUvWxYz",
]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_no_token(kernel, text: str) -> None:
    for context in ("{}", "a {} b", "'{}'"):
        found = kernel.find_spans(context.format(text))
        assert not found, (text, found)


@pytest.mark.parametrize("kernel", TWINS)
def test_underscore_wrapping_of_fixed_length_alphanumeric_tokens(kernel) -> None:
    # As for ghp_ tokens: "_" (Markdown emphasis, snake_case glue) around a token of a fixed
    # length of letters and digits does not hide it.
    for token, type_ in ((NPM, "NPM_TOKEN"), (TWILIO, "TWILIO_KEY"), (HF, "HUGGINGFACE_TOKEN")):
        text = f"_{token}_"
        assert kernel.find_spans(text) == [(1, 1 + len(token), type_, "format")]


@pytest.mark.parametrize("kernel", TWINS)
def test_anthropic_and_openai_keys_are_told_apart(kernel) -> None:
    openai = "sk-proj-Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789"
    text = f"{ANTHROPIC} {openai}"
    assert [t for _, _, t, _ in kernel.find_spans(text)] == ["ANTHROPIC_KEY", "OPENAI_KEY"]
    # Below the length every sk- key needs, neither is found.
    assert kernel.find_spans("sk-ant-api03-Ab3dEf7hIj9kLmN0pQr") == []


@pytest.mark.parametrize("kernel", TWINS)
def test_a_token_assigned_to_a_secret_name_is_one_finding_of_its_own_type(kernel) -> None:
    for token, type_ in TOKENS:
        for text in (f'GOOGLE_API_KEY="{token}"', f"password = {token}", f"//registry.npmjs.org/:_authToken={token}"):
            s = text.index(token)
            assert kernel.find_spans(text) == [(s, s + len(token), type_, "format")], text


_ALPHABETS = [string.ascii_letters + string.digits, string.ascii_letters + string.digits + "_-",
              "0123456789abcdef", string.ascii_letters, "ab1_-.X"]
_PREFIXES = ["AIza", "GOCSPX-", "npm_", "pypi-AgEIcHlwaS5vcmc", "pypi-AgENdGVzdC5weXBpLm9yZw", "SG.", "SK", "hf_",
             "sk-ant-", "sk-"]


def _near_token(rng: random.Random) -> str:
    prefix = rng.choice(_PREFIXES)
    alphabet = rng.choice(_ALPHABETS)
    n = rng.choice([rng.randint(0, 100), 22, 28, 32, 32, 34, 34, 35, 36, 43, 65, 66, 66, 67, rng.randint(60, 80)])
    body = "".join(rng.choice(alphabet) for _ in range(n))
    if prefix == "SG." and rng.random() < 0.7:
        body = body[:22] + "." + body[23:]
    before = rng.choice(["", " ", "x", "_", "-", ".", "=", "'", "9", "é"])
    after = rng.choice(["", " ", "x", "_", "-", ".", ".x", "'", "9", "é"])
    return before + prefix + body + after


def test_the_twins_agree_on_near_tokens() -> None:
    rng = random.Random(20261204)
    for _ in range(4000):
        text = " ".join(_near_token(rng) for _ in range(rng.randint(1, 3)))
        assert _detect.find_spans(text) == _detect_py.find_spans(text), text


# -- names whose last word names an attribute of a credential ------------------------------------
# `auth_provider: google-oauth2-provider` names who issues a credential: the value reads as a name
# and is no secret, though the name holds "auth" and the value has digits and entropy.

ATTRIBUTE_PAIRS = [
    ("auth_provider", "google-oauth2-provider"),
    ("authProvider", "google-oauth2-provider"),
    ("auth_scheme", "oauth2-client-credentials"),
    ("token_issuer", "accounts-google-com-v2"),
    ("token_audience", "api-gateway-prod-v2"),
    ("key_vault", "kv-prod-westeurope-01"),
    ("key_status", "active-2024-rotated"),
    ("auth_backend", "ldap2-backend-primary"),
    ("password_strength", "strong-12chars-min"),
    ("key_usage", "digitalSignature-keyEncipherment"),
    ("key_region", "eu-west-1-primary"),
    ("token_status", "expired-after-3600s"),
    ("auth_service", "keycloak-v21-prod"),
    ("token_types", "access-token-v2-jwt"),
    ("password_policies", "strong-passwords-required-v2"),
    ("auth_methods", "oauth2-saml2-passkey"),
    ("password_hash_algo", "argon2id-v19-m65536"),
    ("password_rotation", "Every90Days"),
    ("api_key_source", "vault:secret/data/app"),
    ("auth_provider2", "google-oauth2-provider"),
]

FORMS = [
    "{k}: {v}",
    '{{"{k}": "{v}"}}',
    "{k} = '{v}'",
    "export {K}={v}",
    "<{k}>{v}</{k}>",
    "cmd --{k} {v}",
    '{{"name": "{k}", "value": "{v}"}}',
    "{k}: |\n  {v}\n",
    "FROM x\nENV {K} {v}\n",
]


def _forms(key: str, value: str) -> list[str]:
    return [f.format(k=key, K=key.upper(), v=value) for f in FORMS]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("key,value", ATTRIBUTE_PAIRS)
def test_a_name_under_a_credential_attribute_is_no_secret(kernel, key: str, value: str) -> None:
    for text in _forms(key, value):
        assert kernel.find_spans(text) == [], text


# Real secrets stay found: under a name that is the secret, a value that is no name (random,
# symbols), one the detector knows by its form, or a name whose last word is not an attribute.
STILL_SECRETS = [
    ("auth", "google-oauth2-provider", "GENERIC_SECRET"),
    ("token", "google-oauth2-provider", "GENERIC_SECRET"),
    ("api_key", "google-oauth2-provider", "GENERIC_SECRET"),
    ("auth_provider_value", "google-oauth2-provider", "GENERIC_SECRET"),
    ("auth_provider_secret", "google-oauth2-provider", "GENERIC_SECRET"),
    ("auth_provider", "aB3dE5fG7hJ9kL1mN3pQ", "GENERIC_SECRET"),
    ("auth_provider", "xK9mP2vL7qR4tW8zY3nB", "GENERIC_SECRET"),
    ("auth_provider", "A1B2-C3D4-E5F6-G7H8-J9K0", "GENERIC_SECRET"),
    ("key_status", "f83Kd92nLq0Zp7Xc4Vb1", "GENERIC_SECRET"),
    ("auth_provider", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "GOOGLE_API_KEY"),
    ("token_issuer", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "STRIPE_KEY"),
    ("auth_provider", "AKIAQ3EGRZ7XPLMN4HTB", "AWS_ACCESS_KEY"),
    ("password_strength", "Tr0ub4dor&3xyz!", "GENERIC_SECRET"),
]


@pytest.mark.parametrize("kernel", TWINS)
@pytest.mark.parametrize("key,value,type_", STILL_SECRETS)
def test_a_secret_under_any_name_is_still_found(kernel, key: str, value: str, type_: str) -> None:
    for text in _forms(key, value):
        found = kernel.find_spans(text)
        s = text.index(value)
        assert [(a, b, t) for a, b, t, _ in found] == [(s, s + len(value), type_)], (text, found)


@pytest.mark.parametrize("kernel", TWINS)
def test_no_passphrase_under_an_attribute_name(kernel) -> None:
    # An element named for a password's attribute holds words about it, not the password.
    assert kernel.find_spans("<password_strength>very strong indeed</password_strength>") == []
    assert kernel.find_spans("<password_strength>Xk9mP2vL7qR4tWz8 (set)</password_strength>") != []
    assert kernel.find_spans("<password>correct horse battery staple</password>") != []


def test_the_twins_agree_on_values_under_attribute_names() -> None:
    rng = random.Random(7)
    alphabet = "aZ09-_.:/x Q#"
    for _ in range(3000):
        key = rng.choice(["auth_provider", "tokenIssuer", "password_strength", "key_types", "api_key"])
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(8, 30)))
        for text in _forms(key, value)[:5]:
            assert _detect.find_spans(text) == _detect_py.find_spans(text), text
