"""Table tests of the secret/PII detectors, redaction and classification.

Every table case runs through both twins (native and reference) with the oracle helper, then the
agreed result is compared with the expected findings.
"""
from __future__ import annotations

import base64
import dataclasses

import pytest

from qdrant_guard import detect
from qdrant_guard.detect import FINDING_TYPES, Finding, classify_text, find_sensitive, redact, redact_with_findings
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
JWT_NO_ALG = "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiIxIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"  # {"typ":"JWT"}
GH = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
GH_PAT = "github_pat_" + "11ABCDEFG0abcdefghijkl" + "_" + "Ab1" * 19 + "Zz"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n-----END RSA PRIVATE KEY-----"

# (text, [(type, secret substring, validator), ...]) -- substrings are located with str.index.
POSITIVES = [
    ("SSN 123-45-6789 on file", [("SSN", "123-45-6789", "ssa-rules")]),
    ("ssn 123 45 6789", [("SSN", "123 45 6789", "ssa-rules")]),
    ("Social Security number: 123456789.", [("SSN", "123456789", "ssa-rules")]),
    ("card 4111 1111 1111 1111 exp 09/27", [("CREDIT_CARD", "4111 1111 1111 1111", "luhn")]),
    ("mc 5555-5555-5555-4444", [("CREDIT_CARD", "5555-5555-5555-4444", "luhn")]),
    ("amex 3782 822463 10005", [("CREDIT_CARD", "3782 822463 10005", "luhn")]),
    ("plain 4012888888881881", [("CREDIT_CARD", "4012888888881881", "luhn")]),
    ("IBAN DE89 3704 0044 0532 0130 00.", [("IBAN", "DE89 3704 0044 0532 0130 00", "mod97")]),
    ("iban:GB82WEST12345698765432", [("IBAN", "GB82WEST12345698765432", "mod97")]),
    ("mail John.Doe+rag@mail.corp-x.io.", [("EMAIL", "John.Doe+rag@mail.corp-x.io", "format")]),
    ("call (415) 555-0134 now", [("PHONE", "(415) 555-0134", "nanp")]),
    ("call 415-555-0134 or 415.555.0199", [("PHONE", "415-555-0134", "nanp"), ("PHONE", "415.555.0199", "nanp")]),
    ("call 1-800-555-0100", [("PHONE", "1-800-555-0100", "nanp")]),
    ("uk +44 20 7946 0958 us +14155550134", [("PHONE", "+44 20 7946 0958", "e164"), ("PHONE", "+14155550134", "e164")]),
    ("id=AKIAZ2Q3W4E5R6T7Y3U4", [("AWS_ACCESS_KEY", "AKIAZ2Q3W4E5R6T7Y3U4", "format")]),
    (
        "aws_secret_access_key = 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",
        [("AWS_SECRET_KEY", "Kq2mZ8vT4xR7nW1pL6yB3cH9dF0gJ5sA2eU8iO4t", "aws-context")],
    ),
    ("blob Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t end", [("AWS_SECRET_KEY", "Kq2mZ8vT4xR/nW1pL6yB3cH9dF0gJ5sA2eU8iO+t", "entropy>=4.5")]),
    (f"token {GH}", [("GITHUB_TOKEN", GH, "format")]),
    (f"GH={GH_PAT}", [("GITHUB_TOKEN", GH_PAT, "format")]),
    ("glpat-Ab3De5Fg7Hj9Kl1Mn3Pq", [("GITLAB_TOKEN", "glpat-Ab3De5Fg7Hj9Kl1Mn3Pq", "format")]),
    ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", [("SLACK_TOKEN", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "format")]),
    (
        "hook https://hooks.slack.com/services/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 ok",
        [("SLACK_TOKEN", "https://hooks.slack.com/services/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", "format")],
    ),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", [("STRIPE_KEY", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "format")]),
    ("rk_test_51HqLyjWDarjtT1zdp7dcAbCd", [("STRIPE_KEY", "rk_test_51HqLyjWDarjtT1zdp7dcAbCd", "format")]),
    ("OPENAI=sk-proj-Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", [("OPENAI_KEY", "sk-proj-Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", "format")]),
    ("ANTHROPIC=sk-ant-api03-Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", [("ANTHROPIC_KEY", "sk-ant-api03-Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", "format")]),
    ("maps key=AIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6q", [("GOOGLE_API_KEY", "AIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6q", "format")]),
    ("oauth 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 ok", [("GOOGLE_OAUTH_SECRET", "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", "format")]),
    ("//registry.npmjs.org/:_authToken=npm_Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", [("NPM_TOKEN", "npm_Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789", "format")]),
    (f"password = {'pypi-AgEIcHlwaS5vcmc' + 'Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789_-' * 2}",
     [("PYPI_TOKEN", "pypi-AgEIcHlwaS5vcmc" + "Ab3dEf7hIj9kLmN0pQrStUvWxYz123456789_-" * 2, "format")]),
    ("SG.Ab3dEf7hIj9kLmN0pQ_rSt.Uv-WxYz123456789Ab3dEf7hIj9kLmN0pQrStUvWxYz", [("SENDGRID_KEY", "SG.Ab3dEf7hIj9kLmN0pQ_rSt.Uv-WxYz123456789Ab3dEf7hIj9kLmN0pQrStUvWxYz", "format")]),
    ("twilio SK2f9c0e4b7d1a8f3e6c5b2a9d8e7f6a5b", [("TWILIO_KEY", "SK2f9c0e4b7d1a8f3e6c5b2a9d8e7f6a5b", "format")]),
    ("HF_TOKEN hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", [("HUGGINGFACE_TOKEN", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "format")]),
    ("shopify 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", [("SHOPIFY_TOKEN", "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", "format")]),
    ("doctl auth init -t dop_v1_" + "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d" * 2, [("DIGITALOCEAN_TOKEN", "dop_v1_" + "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d" * 2, "format")]),
    ("mailgun api key-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", [("MAILGUN_KEY", "key-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", "format")]),
    ("DATABRICKS_HOST=x dapi1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d-2", [("DATABRICKS_TOKEN", "dapi1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d-2", "format")]),
    ("LINEAR_API_KEY lin_api_Ab3dEf7hIj9kLmN0pQrStUvWxYz1234567890abc", [("LINEAR_KEY", "lin_api_Ab3dEf7hIj9kLmN0pQrStUvWxYz1234567890abc", "format")]),
    ("doppler dp.st.dev.bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi", [("DOPPLER_TOKEN", "dp.st.dev.bAqhcVzrhy5cRHkOlNTc0Ve6w5NUDCpcutm8vGE9myi", "format")]),
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/QEFCQ0RFRg==;EndpointSuffix=core.windows.net", [("AZURE_STORAGE_KEY", "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/QEFCQ0RFRg==", "format")]),
    ("x-api-key: PMAK-1a2b3c4d5e6f7a8b9c0d1e2f-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e", [("POSTMAN_KEY", "PMAK-1a2b3c4d5e6f7a8b9c0d1e2f-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e", "format")]),
    (f"Authorization: Bearer {JWT}", [("JWT", JWT, "jwt-header-json")]),
    (f"key:\n{PEM}\n", [("PRIVATE_KEY", PEM, "pem-armor")]),
    ('{"k": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n"}', [("PRIVATE_KEY", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA", "pem-begin")]),
    ("postgres://app:S3cr3tPw!@db.internal:5432/x", [("DATABASE_URL_PASSWORD", "S3cr3tPw!", "url-userinfo")]),
    ("mongodb+srv://u:Zq9#x!T2@cluster0.mongodb.net/db", [("DATABASE_URL_PASSWORD", "Zq9#x!T2", "url-userinfo")]),
    ("redis://:Rd5s-Pw_9@cache:6379/0", [("DATABASE_URL_PASSWORD", "Rd5s-Pw_9", "url-userinfo")]),
    ('API_KEY = "Zk29fjA01kd8Gh3LmQ9x"', [("GENERIC_SECRET", "Zk29fjA01kd8Gh3LmQ9x", "entropy>=3.5")]),
    ('{"clientSecret": "q8W#e2R!t6Y@u0I$o4P"}', [("GENERIC_SECRET", "q8W#e2R!t6Y@u0I$o4P", "entropy>=3.5")]),
    ("db_password: Hq8#kLm2$pQr9vXz", [("GENERIC_SECRET", "Hq8#kLm2$pQr9vXz", "entropy>=3.5")]),
    ("export AUTH_TOKEN=f83Kd92nLq0Zp7Xc4Vb1", [("GENERIC_SECRET", "f83Kd92nLq0Zp7Xc4Vb1", "entropy>=3.5")]),
    ('apiKey := "Mn4Bv7Cx1Zl8Kj5Hg2Fd"', [("GENERIC_SECRET", "Mn4Bv7Cx1Zl8Kj5Hg2Fd", "entropy>=3.5")]),
    ("smtp_password: cx2KE0WmD4f3", [("GENERIC_SECRET", "cx2KE0WmD4f3", "password-charset")]),
    ('DB_PASS="k9#Lm2!q"', [("GENERIC_SECRET", "k9#Lm2!q", "password-charset")]),
    # numbers listed with single spaces run into one chain; every number of the list is found
    ("cards 4111111111111111 4012888888881881 5555555555554444",
     [("CREDIT_CARD", c, "luhn") for c in ("4111111111111111", "4012888888881881", "5555555555554444")]),
    ("4111 1111 1111 1111 4012 8888 8888 1881 on file",
     [("CREDIT_CARD", "4111 1111 1111 1111", "luhn"), ("CREDIT_CARD", "4012 8888 8888 1881", "luhn")]),
    ("ssns 123 45 6789 234 56 7890", [("SSN", "123 45 6789", "ssa-rules"), ("SSN", "234 56 7890", "ssa-rules")]),
    ("card 4111 1111 1111 1111 123 exp", [("CREDIT_CARD", "4111 1111 1111 1111", "luhn")]),
    ("call 555 123 4567 890", [("PHONE", "555 123 4567", "nanp")]),
    ("1 2 3 4 5 6 7 4111111111111111", [("CREDIT_CARD", "4111111111111111", "luhn")]),
    # a list's leading groups are no finding where they would cut a later number's own finding
    # (a Luhn-valid "card" 4000 1005 1111 123 took the SSN's area and left "45 6789" in the clear);
    # the digits of that card reading that the later finding leaves are a card stretch of their
    # own, so neither reading has a digit in the clear (tests/test_glued_card.py)
    ("4000 1005 1111 123 45 6789", [("CREDIT_CARD", "4000 1005 1111", "luhn"), ("SSN", "123 45 6789", "ssa-rules")]),
    # two overlapping card readings: the stretch 4008 runs into the card finding, which starts there
    # (one placeholder since h-card5; was 4008 and 4111 1111 1111 1111 apart)
    ("4008 4111 1111 1111 1111", [("CREDIT_CARD", "4008 4111 1111 1111 1111", "luhn")]),
    # a card glued to a longer dashed run: the card and the group glued after it (h-card4)
    ("4111-1111-1111-1111-4012", [("CREDIT_CARD", "4111-1111-1111-1111-4012", "luhn")]),
]

NEGATIVES = [
    # SSA rules, one per rule, and the advertising numbers
    "000-12-3456", "666-12-3456", "900-12-3456", "999-12-3456", "123-00-4567", "123-45-0000",
    "078-05-1120", "219-09-9999",
    "id 123456789",  # bare 9 digits without an SSN keyword
    "123-45-6789-01", "123-45-6789abc",
    # Luhn / IIN / grouping
    "4111 1111 1111 1112", "9111 1111 1111 1111 1", "4111.1111.1111.1112", "4111 1111-1111 1112",  # mixed separators: Luhn still checked
    # mod-97 and country lengths
    "DE88 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130", "ZZ89370400440532013000",
    # e-mail shape
    "user@localhost", "a@b.c", "@decorator", "x@y.c0m", "john..doe@corp.io",
    "postgres://u@db.corp.io/x",
    # dates, versions, IPs, integers are not phones
    "2024-01-15", "12/05/2024", "v2.0.1-rc1", "1.2.3", "192.168.100.1", "5551234567", "+0123456789",
    "(155) 123-4567",
    # documented example keys and anything with EXAMPLE
    "AKIAIOSFODNN7EXAMPLE", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ghp_EXAMPLEabcdefghijklmnopqrstuvwxyz012345",
    "AKIAZ2Q3W4E5R6T7Y3U", "AKIAZ2Q3W4E5R6T7Y3U18",  # wrong length / alphabet
    "ghp_short", "xoxb-123", "sk_live_short", "sk-learn-is-a-python-package-name-really",
    JWT_NO_ALG,
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    # placeholders in URLs
    "postgres://user:password@localhost/x", "mysql://app:${MYSQL_PASSWORD}@db/x", "redis://:****@c:6379",
    "postgres://app:@db/x", "https://user:S3cr3tPw!@web.corp.io/",
    # hex digests, UUIDs, identifiers, placeholders in assignments
    "secret = 'da39a3ee5e6b4b0d3255bfef95601890afd80709'",
    "api_key: d41d8cd98f00b204e9800998ecf8427e",
    "token: 550e8400-e29b-41d4-a716-446655440000",
    "api_key = get_api_key_from_env()", "token_count = 4096",
    'password_reset_url = "https://app.corp.io/reset/Zk29fjA01kd8"',
    "secret_key = settings.SECRET_KEY_VALUE", "password = os.environ['DB_PASSWORD']",
    "api_key: <your-api-key-goes-here>", 'token = "${GITHUB_TOKEN_FROM_CI}"',
    "password: changeme", 'auth_token = "REDACTED"', "secret: xxxxxxxxxxxxxxxxxxxx",
    "if password == 'Zk29fjA01kd8Gh3LmQ9x':",  # comparison, not assignment
    "key_path = '/etc/ssl/private/server-2024.key'",
    'author = "Jane Q. Public-Smith 2024"',
    "password: abcdefghijk", "password: Ab1cD2e",  # one class; too short
    "token: Ab1Cd2Ef3gH",  # not a password name, so the 16-character entropy rule applies
    "1999 2000 2001 2002 2003 2004 2005 2006", "1 2 3 4 5 6 7 8 9 10 11 12",  # lists, nothing in them
    "1234-5678-9012-3456-7890",  # a dashed run of numbers with no card in it
    # a 3-2-4 window of a list of numbers is no SSN without "ssn" nearby (alone it still is one)
    "sizes 512 64 1024 2048 4096", "top ports 443 80 8080 22 3306 5432", "dims 768 12 3072 64",
]


def _expected(text: str, items: list[tuple[str, str, str]]) -> list[tuple[int, int, str, str]]:
    out = []
    for type_, sub, validator in items:
        start = text.index(sub)
        out.append((start, start + len(sub), type_, validator))
    return sorted(out)


@pytest.mark.parametrize(("text", "items"), POSITIVES, ids=[p[1][0][0] + "-" + str(i) for i, p in enumerate(POSITIVES)])
def test_positive(text: str, items: list[tuple[str, str, str]]) -> None:
    got = assert_same(NATIVE.find_spans, PYTHON.find_spans, text)
    assert got == _expected(text, items)


@pytest.mark.parametrize("text", NEGATIVES)
def test_negative(text: str) -> None:
    assert assert_same(NATIVE.find_spans, PYTHON.find_spans, text) == []


def test_finding_objects_and_offsets_are_code_points() -> None:
    text = "é😀 SSN 123-45-6789 \ud800 mail a.b@corp.io"
    findings = find_sensitive(text)
    assert [text[f.start : f.end] for f in findings] == ["123-45-6789", "a.b@corp.io"]
    assert findings[0] == Finding("SSN", 7, 18, "ssa-rules", "PII")
    with pytest.raises(dataclasses.FrozenInstanceError):
        findings[0].start = 0  # type: ignore[misc]


def test_categories() -> None:
    text = f"a.b@corp.io {GH}"
    assert [(f.type, f.category) for f in find_sensitive(text)] == [("EMAIL", "PII"), ("GITHUB_TOKEN", "CREDENTIAL")]


def test_finding_types_constant() -> None:
    assert FINDING_TYPES == NATIVE.FINDING_TYPES == PYTHON.FINDING_TYPES
    assert NATIVE.PII_TYPES == PYTHON.PII_TYPES == {"IBAN", "CREDIT_CARD", "SSN", "EMAIL", "PHONE"}
    assert len(set(FINDING_TYPES)) == 32
    found = {t for text, items in POSITIVES for t, _, _ in items}
    assert found == set(FINDING_TYPES), "every type has a positive table case"


def test_redact() -> None:
    text = f"SSN 123-45-6789, pg postgres://app:S3cr3tPw!@db/x, token {GH}."
    assert redact(text) == "SSN [SSN], pg postgres://app:[DATABASE_URL_PASSWORD]@db/x, token [GITHUB_TOKEN]."
    redacted, findings = redact_with_findings(text)
    assert redacted == redact(text)
    assert [f.type for f in findings] == ["SSN", "DATABASE_URL_PASSWORD", "GITHUB_TOKEN"]
    assert redact("nothing here") == "nothing here"
    assert redact("") == ""


def test_redact_every_type_leaves_no_secret() -> None:
    for text, items in POSITIVES:
        out = redact(text)
        for type_, sub, _ in items:
            assert sub not in out
            assert f"[{type_}]" in out


def test_overlap_longer_wins_then_stronger_type() -> None:
    # Same span: the specific token beats the generic assignment rule.
    text = f"GITHUB_TOKEN={GH}"
    assert [(f.type, f.start) for f in find_sensitive(text)] == [("GITHUB_TOKEN", 13)]
    # Longer wins: an IBAN containing a Luhn-valid, card-prefixed digit group.
    iban = "DE89 3704 0044 0532 0130 00"
    assert [f.type for f in find_sensitive(iban)] == ["IBAN"]
    # A private key body never yields inner findings.
    assert [f.type for f in find_sensitive(PEM)] == ["PRIVATE_KEY"]


def test_classify_text() -> None:
    assert classify_text("the weather is nice") == "PUBLIC"
    assert classify_text("write to a.b@corp.io") == "PII"
    assert classify_text(f"a.b@corp.io and {GH}") == "CREDENTIAL"
    assert classify_text("") == "PUBLIC"


@pytest.mark.parametrize("fn", [find_sensitive, redact, redact_with_findings, classify_text])
@pytest.mark.parametrize("bad", [None, b"SSN 123-45-6789", 42, ["x"]])
def test_public_api_rejects_non_str(fn, bad) -> None:
    with pytest.raises(TypeError, match=rf"{fn.__name__}\(\) argument 'text' must be str, not {type(bad).__name__}"):
        fn(bad)


@pytest.mark.parametrize("bad", [None, b"x", 3.5])
def test_kernels_are_none_safe(bad) -> None:
    err = assert_same(NATIVE.find_spans, PYTHON.find_spans, bad)
    assert isinstance(err, TypeError)
    assert str(err) == f"find_spans() argument 'text' must be str, not {type(bad).__name__}"


def test_dispatcher_uses_selected_kernel() -> None:
    from qdrant_guard._impl import implementation

    expected = NATIVE if implementation() == "native" else PYTHON
    assert detect._kernel is expected


# Unicode the detectors' ASCII classes do not see, but a reader and most embedders do: full-width
# and other decimal digits, no-break and other spaces, Unicode hyphens (Word's non-breaking hyphen),
# and invisible format characters (zero-width space, soft hyphen, bidi marks) inside a value. BERT
# style tokenizers drop the format characters and split on every Unicode space, so the embedder
# gets the plain SSN. A folded view of the text is scanned too; findings keep original offsets.
FOLDED = [
    ("SSN \uff11\uff12\uff13-\uff14\uff15-\uff16\uff17\uff18\uff19", "SSN"),
    ("SSN \u0661\u0662\u0663-\u0664\u0665-\u0666\u0667\u0668\u0669", "SSN"),
    ("ssn 123\u00a045\u00a06789", "SSN"),
    ("SSN 123-45-67\u200b89 on file", "SSN"),
    ("SSN 123\u00ad-45-6789", "SSN"),
    ("SSN 123\u201145\u20116789", "SSN"),
    ("card 4111\u00a01111\u00a01111\u00a01111 exp", "CREDIT_CARD"),
    ("card 4111\u202f1111\u202f1111\u202f1111", "CREDIT_CARD"),
    ("card 41111111\u200c11111111", "CREDIT_CARD"),
    ("IBAN DE89\u00a03704\u00a00044\u00a00532\u00a00130\u00a000", "IBAN"),
    ("call (415)\u00a0555\u2011" + "0134", "PHONE"),
    ("key \uff21\uff2b\uff29\uff21Z2Q3W4E5R6T7Y3U4", "AWS_ACCESS_KEY"),
    ("key AKIAZ2Q3\u200dW4E5R6T7Y3U4", "AWS_ACCESS_KEY"),
    ("token ghp_aB3dE5fG7hJ9kL1m\u2060N3pQ5rS7tU9vW1xY3z5A", "GITHUB_TOKEN"),
    ("mail john.doe\u200b@corp.io", "EMAIL"),
    ("mail john.doe\uff20corp.io", "EMAIL"),
    ("SSN " + "".join(chr(0x1D7EC + int(c)) if c.isdigit() else c for c in "123-45-6789"), "SSN"),
    ("SSN 1\u03362\u03363\u0336-45-6789", "SSN"),
    ("key AKIAZ2Q3\U000e0041W4E5R6T7Y3U4", "AWS_ACCESS_KEY"),
]


def _spans(kernel, text):
    return detect._find_spans(text, kernel.find_spans)


@pytest.mark.parametrize(("text", "type_"), FOLDED)
def test_unicode_digits_spaces_hyphens_and_invisible_characters_are_seen_through(text: str, type_: str) -> None:
    got = assert_same(lambda t: _spans(NATIVE, t), lambda t: _spans(PYTHON, t), text)
    assert [t for _, _, t, _ in got] == [type_]
    (start, end, _, _), = got
    # The span is the whole value in the original text: nothing of it is left after redaction.
    assert text[start - 1] == " " and (end == len(text) or text[end] == " ")
    assert redact(text) == text[:start] + f"[{type_}]" + text[end:]


def test_folding_only_adds_findings() -> None:
    # A zero-width character that separates a word from a number: the plain scan finds the SSN,
    # and deleting the character in the folded view (which glues them) must not lose it.
    text = "x\u200b123-45-6789 and \uff11\uff12\uff13-\uff14\uff15-\uff16\uff17\uff18\uff19"
    assert [(f.type, text[f.start:f.end]) for f in find_sensitive(text)] == [
        ("SSN", "123-45-6789"), ("SSN", "\uff11\uff12\uff13-\uff14\uff15-\uff16\uff17\uff18\uff19")]
    for text in ("\uff11\uff12\uff13", "caf\u00e9 \u00a0 na\u00efve \u200b", "\u00a0" * 50, "\u200b" * 50,
                 "\u0661\u0662\u0663\u0664"):
        assert find_sensitive(text) == []


ENCODED = [
    # (text, type, validator suffix, the encoded span)
    ("ref MTIzLTQ1LTY3ODk= end", "SSN", "+base64", "MTIzLTQ1LTY3ODk="),
    ("ref MTIzLTQ1LTY3ODk end", "SSN", "+base64", "MTIzLTQ1LTY3ODk"),
    ("key " + base64.b64encode(b"AKIAIOSFODNN7ABCDEFG").decode() + " end", "AWS_ACCESS_KEY", "+base64",
     base64.b64encode(b"AKIAIOSFODNN7ABCDEFG").decode()),
    ("h 0x" + b"ssn 078-05-1121".hex() + " end", "SSN", "+hex", "0x" + b"ssn 078-05-1121".hex()),
    ("h " + b"123-45-6789".hex().upper() + " end", "SSN", "+hex", b"123-45-6789".hex().upper()),
    ("ssn 123%2D45%2D6789 end", "SSN", "+percent", "123%2D45%2D6789"),
    ("mail bob%40corp.io end", "EMAIL", "+percent", "bob%40corp.io"),
    ("card 4111%201111%201111%201111 end", "CREDIT_CARD", "+percent", "4111%201111%201111%201111"),
    ("ssn &#49;&#50;&#51;-45-6789 end", "SSN", "+html-entity", "&#49;&#50;&#51;-45-6789"),
    ("mail bob&#x40;corp.io end", "EMAIL", "+html-entity", "bob&#x40;corp.io"),
    ("ssn \\x31\\x32\\x33-45-6789 end", "SSN", "+hex-escape", "\\x31\\x32\\x33-45-6789"),
    ("ssn \\u0031\\U00000032\\u0033-45-6789 end", "SSN", "+unicode-escape", "\\u0031\\U00000032\\u0033-45-6789"),
    ("mix 123%2D45&#45;6789 end", "SSN", "+escapes", "123%2D45&#45;6789"),
    # An escape just before a run: its hex digits are not part of the run (they misaligned it).
    ("ssn:%20MTIzLTQ1LTY3ODk%3D end", "SSN", "+base64", "MTIzLTQ1LTY3ODk"),
    ("x \\u003dMTIzLTQ1LTY3ODk= x", "SSN", "+base64", "MTIzLTQ1LTY3ODk="),
    ("x%3D3132332d34352d36373839 x", "SSN", "+hex", "3132332d34352d36373839"),
    # Escapes of what the folded view sees through: the escape view is folded too.
    ("card 4111&nbsp;1111&nbsp;1111&nbsp;1111 end", "CREDIT_CARD", "+html-entity",
     "4111&nbsp;1111&nbsp;1111&nbsp;1111"),
    ("card 4111\\u00a01111\\u00a01111\\u00a01111 end", "CREDIT_CARD", "+unicode-escape",
     "4111\\u00a01111\\u00a01111\\u00a01111"),
    ("ssn 123&ndash;45&ndash;6789 end", "SSN", "+html-entity", "123&ndash;45&ndash;6789"),
    ("ssn 123-45-67\\u200b89 end", "SSN", "+unicode-escape", "123-45-67\\u200b89"),
    ("ssn &#65297;&#65298;&#65299;-45-6789 end", "SSN", "+html-entity", "&#65297;&#65298;&#65299;-45-6789"),
    # Numeric references as browsers read them: leading zeros, no semicolon, cp1252 remapping.
    ("ssn &#0000000049;&#0000000050;&#0000000051;-45-6789 end", "SSN", "+html-entity",
     "&#0000000049;&#0000000050;&#0000000051;-45-6789"),
    ("ssn &#x0000031;&#X00000032;&#x0000033;-45-6789 end", "SSN", "+html-entity",
     "&#x0000031;&#X00000032;&#x0000033;-45-6789"),
    ("ssn &#49&#50&#51-45-6789 end", "SSN", "+html-entity", "&#49&#50&#51-45-6789"),
    ("ssn 123&#150;45&#150;6789 end", "SSN", "+html-entity", "123&#150;45&#150;6789"),
    # Legacy names without the semicolon, also where a later ';' makes a longer unknown name.
    ("card 4111&nbsp1111&nbsp1111&nbsp1111 end", "CREDIT_CARD", "+html-entity", "4111&nbsp1111&nbsp1111&nbsp1111"),
    ("card 4111&nbsp1111&nbsp1111&nbsp1111; end", "CREDIT_CARD", "+html-entity",
     "4111&nbsp1111&nbsp1111&nbsp1111"),
    ("ssn 123-45-67&shy89 end", "SSN", "+html-entity", "123-45-67&shy89"),
    # JSON's surrogate pairs are one character: a mathematical digit, an invisible tag character.
    ("ssn \\ud835\\udfcf\\ud835\\udfd0\\ud835\\udfd1-45-6789 end", "SSN", "+unicode-escape",
     "\\ud835\\udfcf\\ud835\\udfd0\\ud835\\udfd1-45-6789"),
    ("ssn 123-45-67\\udb40\\udc4189 end", "SSN", "+unicode-escape", "123-45-67\\udb40\\udc4189"),
    # Any HTML5 name, not only the scanner's list.
    ("tok ghp&UnderBar;aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A end", "GITHUB_TOKEN", "+html-entity",
     "ghp&UnderBar;aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"),
    # JSON's one-character escapes: an escaped slash inside a value, or an escape glued to one.
    ("hook https:\\/\\/hooks.slack.com\\/services\\/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 ok",
     "SLACK_TOKEN", "+json-escape",
     "https:\\/\\/hooks.slack.com\\/services\\/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"),
    ("ssn \\n123-45-6789 end", "SSN", "ssa-rules", "123-45-6789"),
    ("x\\tAKIAZ2Q3W4E5R6T7Y3U4 end", "AWS_ACCESS_KEY", "format", "AKIAZ2Q3W4E5R6T7Y3U4"),
    ('{\\"api_key\\": \\"Zk29fjA01kd8Gh3LmQ9x\\"}', "GENERIC_SECRET", "entropy>=3.5", "Zk29fjA01kd8Gh3LmQ9x"),
    ("ssn \\nMTIzLTQ1LTY3ODk= end", "SSN", "+base64", "MTIzLTQ1LTY3ODk="),
]


@pytest.mark.parametrize(("text", "type_", "how", "span"), ENCODED)
def test_encoded_values_are_decoded_and_found(text: str, type_: str, how: str, span: str) -> None:
    got = assert_same(lambda t: _spans(NATIVE, t), lambda t: _spans(PYTHON, t), text)
    assert [(t, v.endswith(how)) for _, _, t, v in got] == [(type_, True)]
    (start, end, _, _), = got
    assert text[start:end] == span
    assert redact(text) == text.replace(span, f"[{type_}]")


@pytest.mark.parametrize("text", [
    "aGVsbG8gd29ybGQgdGhpcyBpcyBhIHRlc3Q=",  # base64 of harmless text
    "the digest 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "a path/to%20my%20file and %41dmin",
    "ZXlKaGJHY2lPaUpJVXpJMU5pSjk=",  # base64 of base64: one level is decoded
    "a &amp; b &#x41; &#9999999; \\uD800 \\U00110000 &nosuchname;",  # escapes of nothing sensitive
])
def test_encoded_text_without_secrets_is_not_a_finding(text: str) -> None:
    assert find_sensitive(text) == []


def test_decoding_keeps_plain_findings() -> None:
    text = "plain 123-45-6789 and MTIzLTQ1LTY3ODk="
    assert [(f.type, f.validator) for f in find_sensitive(text)] == [
        ("SSN", "ssa-rules"), ("SSN", "ssa-rules+base64")]
    assert redact(text) == "plain [SSN] and [SSN]"


def test_classify_text_sees_encoded_credentials() -> None:
    assert classify_text("cfg " + base64.b64encode(b"ghp_" + b"aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A").decode()) \
        == "CREDENTIAL"


def test_overlapping_views_merge_in_linear_time() -> None:
    # Each e-mail of the escape view overlaps two of the plain scan, so all of them chain into one
    # merged group; keeping the group's end by rescanning the group made this quadratic (8 s).
    import time

    text = "x@a.io&#46;x@a.io" * 6000
    # CPU time, not wall time: on a loaded machine waiting for a core is not the merge's cost.
    t0 = time.process_time()
    got = detect._find_spans(text, NATIVE.find_spans)
    assert time.process_time() - t0 < 1.5
    assert [(s, e, t) for s, e, t, _ in got] == [(0, len(text), "EMAIL")]
