"""Review of text handling, policy and CLI: each test pins a defect found and fixed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guardkit import run_cli


def _cli(*args: str) -> subprocess.CompletedProcess:
    # In process (a traceback would propagate and fail the test); the command families run as real
    # subprocesses in tests/test_cli.py, and one here (the authority fixture).
    return run_cli(*args)


@pytest.fixture(scope="module")
def authority(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    proc = subprocess.run([sys.executable, "-m", "qdrant_guard.cli", "keys", "new", "--out", str(d / "a.key")],
                          capture_output=True, text=True, env={**os.environ}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (d / "bad.jsonl").write_text("{not json\n")
    # An existing (empty) local store, so the cases below reach the input they name (a --path that
    # is no store is refused first: tests/test_newuser.py).
    from qdrant_client import QdrantClient

    QdrantClient(path=str(d / "store")).close()
    return d


@pytest.mark.parametrize("argv, names", [
    (["credential", "issue", "--agent", "a", "--boundary", "b", "--ttl", "-5"], "--ttl"),
    (["credential", "issue", "--agent", "a", "--boundary", "b", "--ttl", "nan"], "--ttl"),
    (["credential", "issue", "--agent", "a", "--boundary", "b", "--ttl", "inf"], "--ttl"),
    (["credential", "issue", "--agent", "", "--boundary", "b"], "agent"),
    (["audit", "verify", "--checkpoint-every", "0", "{dir}/bad.jsonl"], "--checkpoint-every"),
    (["keys", "new", "--out", "/proc/no/such/dir/k.pem"], "/proc/no/such"),
    (["calibrate", "--path", "{dir}/store", "--collection", "c", "--queries", "{dir}/missing.jsonl",
      "--out", "{dir}/o.json"], "missing.jsonl"),
    (["receipt", "verify", "--path", "{dir}/store", "--collection", "nope", "--trusted-key", "{dir}/a.key.pub"],
     "nope"),
], ids=["ttl-negative", "ttl-nan", "ttl-inf", "agent-empty", "checkpoint-zero", "out-unwritable",
        "queries-missing", "collection-missing"])
def test_cli_bad_input_is_a_clear_error_not_a_traceback(authority, argv, names):
    argv = [a.replace("{dir}", str(authority)) for a in argv]
    if argv[:2] == ["credential", "issue"]:
        argv += ["--authority", str(authority / "a.key")]
    proc = _cli(*argv)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "error" in proc.stderr and names in proc.stderr, proc.stderr


# -- policy -------------------------------------------------------------------------------------
from qdrant_guard.errors import ConfigError  # noqa: E402
from qdrant_guard.policy import config_from_dict  # noqa: E402


@pytest.mark.parametrize("value", ["metadata.text", "", "chunks[].text", '"a.b"'])
def test_a_text_field_the_guard_cannot_read_is_a_policy_error(value):
    # Only the top-level key named text_field is screened. "metadata.text" (written by analogy with
    # source_field, which does reach nested payload) named no key the guard reads: the nested text
    # was stored and indexed unredacted, silently.
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"collections": {"c": {"text_field": value}}}, source="p.toml")
    msg = str(ei.value)
    assert "collections.c.text_field" in msg and "top-level" in msg


def test_a_plain_text_field_is_still_accepted():
    for value in ("text", "page_content", "_node_content", "body-text"):
        cfg = config_from_dict({"collections": {"c": {"text_field": value}}}, source="p.toml")
        assert cfg.collections["c"].text_field == value


# -- detection ----------------------------------------------------------------------------------
from oracle import assert_same, both  # noqa: E402

from qdrant_guard import detect  # noqa: E402


@pytest.mark.parametrize("text", [
    '{"social_security_number": "123456789"}',
    "social_security_no: 123456789",
    "socialSecurityNumber=123456789",
    "SOCIAL_SECURITY=123456789",
    "social-security number 123456789",
    "Social Security: 123456789",
    "social_security_numbers: 123 45 6789 234 56 7890",
])
def test_a_bare_ssn_after_a_snake_or_camel_case_social_security_key_is_found(text):
    # JSON, YAML, .env and code spell the keyword "social_security", "socialSecurity" or
    # "social-security": as much a context for a bare 9-digit number as "social security".
    redacted, findings = detect.redact_with_findings(text)
    assert findings and {f.type for f in findings} == {"SSN"}, (text, redacted)
    assert "6789" not in redacted
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)


@pytest.mark.parametrize("text", ["socials 123456789", "security_number: 123456789", "social_media 123456789",
                                  "social__security 123456789"])
def test_the_ssn_keyword_still_needs_both_words(text):
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)
    assert detect.find_sensitive(text) == []


# -- text that reaches the embedder -------------------------------------------------------------
from guardkit import DIM, Recorder, count, create, make_kit, models, snapshot  # noqa: E402

from qdrant_guard import GuardRefusal, QdrantClient  # noqa: E402
from qdrant_guard.errors import InvalidVectorError  # noqa: E402

SSN_TEXT = "her SSN is 123-45-6789"


def _named_client(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text"}
    cfg = kit.config({"n": pol, "pubn": {"class": "PUBLIC", "text_field": "text"}})
    emb = Recorder()
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=emb)
    create(client, "n", named=("a", "b"))
    create(client, "pubn", named=("a", "b"))
    return client, emb


@pytest.mark.parametrize("other", [models.InferenceObject(object=SSN_TEXT, model="m"),
                                   models.Image(image="https://example.org/x.png", model="m")],
                         ids=["inference-object", "image"])
def test_a_document_next_to_an_unscreenable_vector_is_refused_by_name_before_embedding(tmp_path, other):
    # Alone, an InferenceObject or Image on a sensitive collection is refused with a message that
    # names it; next to a models.Document the Document was embedded first and the call then failed
    # with "vector has dtype object", naming neither the vector nor its type.
    client, emb = _named_client(tmp_path)
    with pytest.raises(InvalidVectorError) as ei:
        client.upsert("n", [models.PointStruct(id=1, vector={"a": models.Document(text="hello", model="m"),
                                                             "b": other})])
    assert "'b'" in str(ei.value) and type(other).__name__ in str(ei.value)
    assert emb.seen == [] and count(client, "n") == 0


@pytest.mark.parametrize("obj", [{"text": SSN_TEXT}, [SSN_TEXT], {"parts": [{"text": SSN_TEXT}]}],
                         ids=["dict", "list", "nested"])
def test_public_inference_object_text_inside_a_structured_object_is_screened(tmp_path, obj):
    # An InferenceObject string is screened on PUBLIC collections (README); the same text in a
    # dict or list object went to qdrant-client's inference unscreened.
    client, emb = _named_client(tmp_path)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pubn", [models.PointStruct(id=1, vector={"a": models.InferenceObject(object=obj, model="m"),
                                                                "b": [0.1] * DIM})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert count(client, "pubn") == 0


@pytest.mark.parametrize("text, kind", [
    ("_123-45-6789_", "SSN"),                       # Markdown emphasis
    ("__4111 1111 1111 1111__", "CREDIT_CARD"),     # Markdown strong
    ("_DE89370400440532013000_", "IBAN"),
    ("_(415) 555-2671_", "PHONE"),
    ("_415-555-2671_", "PHONE"),
    ("_+44 20 7946 0958_", "PHONE"),
    ("ssn_123456789", "SSN"),                       # snake_case key glued to its value
    ("invoice_4111111111111111.pdf", "CREDIT_CARD"),
])
def test_an_underscore_next_to_a_number_does_not_hide_it(text, kind):
    redacted, findings = detect.redact_with_findings(text)
    assert [f.type for f in findings] == [kind], (text, redacted)
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)


@pytest.mark.parametrize("text", ["x123-45-6789", "4111111111111111a", "id_12345678", "DE89370400440532013000x"])
def test_a_letter_next_to_a_number_still_makes_it_part_of_a_word(text):
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)
    assert detect.find_sensitive(text) == []


OPAQUE = "8f3kLm2Qx9Zt7Wv1Rb4Yn6Hc0Jd5Pe"


@pytest.mark.parametrize("text, secret", [
    (f"Authorization: Bearer {OPAQUE}", OPAQUE),
    (f'curl -H "Authorization: Bearer {OPAQUE}" https://api.corp.io', OPAQUE),
    (f'{{"headers": {{"Authorization": "Bearer {OPAQUE}"}}}}', OPAQUE),
    ("authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1lMTIz", "YWxhZGRpbjpvcGVuc2VzYW1lMTIz"),
    (f"Authorization: token {OPAQUE}", OPAQUE),
    (f"Proxy-Authorization: Bearer {OPAQUE}\r\n", OPAQUE),
    (f"auth_token = Bearer {OPAQUE}", OPAQUE),
])
def test_an_http_authorization_header_value_is_a_generic_secret(text, secret):
    # The commonest place a bearer token is pasted (logs, curl commands, tickets): the scheme word
    # and its space kept the value from ever being read as the header's secret.
    redacted, findings = detect.redact_with_findings(text)
    assert secret not in redacted and [f.type for f in findings] == ["GENERIC_SECRET"], redacted
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)


@pytest.mark.parametrize("text", ["Authorization: Bearer <token>", "Authorization: Bearer ${TOKEN}",
                                  "authorization: bearer token", "Authorization: Bearer",
                                  "authorization_url = https://idp.corp.io/authorize"])
def test_an_authorization_header_placeholder_is_not_a_secret(text):
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)
    assert detect.find_sensitive(text) == []


@pytest.mark.parametrize("section, key, value", [
    ({}, "redact_pii", "no"),
    ({}, "redact_pii", 0),
    ({}, "raw_in_boundary", "yes"),
    ({}, "noise_on_write", 1),
    ("noise", "epsilon", True),
    ("noise", "epsilon", "1.5"),
    ("noise", "keyed", "false"),
    ("query", "max_tokens", "500"),
    ("query", "max_tokens", True),
    ("query", "max_chars", 100.0),
    ("diversity", "max_source_fraction", "0.4"),
    ("intent", "fail_closed", "off"),
])
def test_a_policy_value_of_the_wrong_type_is_refused_not_coerced(section, key, value):
    # TOML has typed values: "no" or 0 for a bool, true for epsilon, "500" for a count are
    # mistakes, and silently reading them as False / 1.0 / 500 hides the mistake.
    pol = {key: value} if not section else {section: {key: value}}
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"collections": {"c": pol}}, source="p.toml")
    dotted = f"collections.c.{section + '.' if section else ''}{key}"
    assert dotted in str(ei.value)


def test_top_level_policy_values_of_the_wrong_type_are_refused():
    for data in ({"audit_fsync": "true"}, {"receipts": {"max_age_s": True}}):
        with pytest.raises(ConfigError):
            config_from_dict(data, source="p.toml")


def test_policy_numbers_written_as_integers_still_validate():
    cfg = config_from_dict({"collections": {"c": {"noise": {"epsilon": 1, "radius": 1}, "query": {"max_tokens": 50},
                                                  "diversity": {"max_source_fraction": 1}}}}, source="p.toml")
    assert cfg.collections["c"].noise.epsilon == 1.0 and cfg.collections["c"].query.max_tokens == 50


MIXED_TEXT = 'SSN 123-45-6789; deploy with aws_access_key_id = "AKIAZ7QP3LMNB4XKDT2Q"'


def _pii_client(tmp_path, **pol):
    kit = make_kit(tmp_path)
    base = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text",
            "credentials_in_text": "redact", "generalize_identifiers": False}
    base.update(pol)
    emb = Recorder()
    client = QdrantClient(":memory:", guard=kit.config({"c": base}), principal=kit.principal("alice", "hr"), embedder=emb)
    create(client, "c")
    return client, emb


def test_kept_payload_pii_stays_kept_when_the_text_also_holds_a_redacted_credential(tmp_path):
    # keep_payload_text_in_boundary keeps PII (never credentials): a credential in the same text
    # was redacted, and the kept SSN with it.
    client, _ = _pii_client(tmp_path, keep_payload_text_in_boundary=True)
    client.upsert("c", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": MIXED_TEXT})])
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == 'SSN 123-45-6789; deploy with aws_access_key_id = "[AWS_ACCESS_KEY]"'


def test_redact_pii_false_keeps_pii_when_the_text_also_holds_a_redacted_credential(tmp_path):
    client, emb = _pii_client(tmp_path, redact_pii=False)
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=MIXED_TEXT, model="m"),
                                           payload={"text": MIXED_TEXT})])
    expected = 'SSN 123-45-6789; deploy with aws_access_key_id = "[AWS_ACCESS_KEY]"'
    assert emb.seen == [expected]
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == expected


@pytest.fixture(scope="module")
def calib_store(tmp_path_factory):
    from qdrant_client import QdrantClient as RawClient

    d = tmp_path_factory.mktemp("calib")
    raw = RawClient(path=str(d / "store"))
    raw.create_collection("c", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    raw.upsert("c", [models.PointStruct(id=i, vector=[1.0, i / 10, 0.5, 0.2]) for i in range(12)])
    raw.close()
    (d / "q.jsonl").write_text("[0.1, 0.2, 0.3, 0.4]\n")
    return d


@pytest.mark.parametrize("queries, qrels, names", [
    ('{"x": 1}\n', None, "q-bad.jsonl:1"),
    ('[0.1, 0.2, 0.3, 0.4]\n{"vector": [1, "a", 3, 4]}\n', None, "q-bad.jsonl:2"),
    ("[0.1, 0.2,\n", None, "q-bad.jsonl:1"),
    (None, '{"query": 0, "relevant": 5}\n', "qrels.jsonl:1"),
    (None, '{"relevant": [1]}\n', "qrels.jsonl:1"),
], ids=["dict-without-text-or-vector", "non-number-in-vector", "broken-json", "relevant-int", "no-query"])
def test_calibrate_names_the_bad_line_of_its_input_files(calib_store, queries, qrels, names):
    d = calib_store
    qfile = d / "q.jsonl"
    if queries is not None:
        qfile = d / "q-bad.jsonl"
        qfile.write_text(queries)
    argv = ["calibrate", "--path", str(d / "store"), "--collection", "c", "--queries", str(qfile),
            "--out", str(d / "o.json"), "--no-progress"]
    if qrels is not None:
        (d / "qrels.jsonl").write_text(qrels)
        argv += ["--qrels", str(d / "qrels.jsonl")]
    proc = _cli(*argv)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert names in proc.stderr, proc.stderr


@pytest.mark.parametrize("text, secret", [
    (r'{"password": "Ab1\"9xQ#k2LmP7zR"}', r'Ab1\"9xQ#k2LmP7zR'),       # json.dumps of a password with "
    (r'password = "Ab1\"9xQ#k2LmP7zR"', r'Ab1\"9xQ#k2LmP7zR'),
    (r"api_key = 'k9\'Lm2Qx9Zt7Wv1Rb4Yn6'", r"k9\'Lm2Qx9Zt7Wv1Rb4Yn6"),
    (r'{"token": "8f3kLm2Qx9Zt7Wv1Rb4Yn6\\"}', r"8f3kLm2Qx9Zt7Wv1Rb4Yn6\\"),  # escaped backslash, then the end
])
def test_a_quoted_secret_with_an_escaped_quote_is_found_whole(text, secret):
    redacted, findings = detect.redact_with_findings(text)
    assert [f.type for f in findings] == ["GENERIC_SECRET"], redacted
    assert text[findings[0].start:findings[0].end] == secret
    native, python = both("detect")
    assert_same(native.find_spans, python.find_spans, text)
