"""Review of text handling, policy and CLI: each test pins a defect found and fixed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qdrant_guard.cli", *args], capture_output=True, text=True,
                          env={**os.environ}, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def authority(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    proc = _cli("keys", "new", "--out", str(d / "a.key"))
    assert proc.returncode == 0, proc.stderr
    (d / "bad.jsonl").write_text("{not json\n")
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
