"""Secrets whose name and value sit in different fields: XML elements, name/value pairs, CLI flags.

Every case runs through both twins (native and pure-Python reference) via the oracle helper.
"""
from __future__ import annotations

import pytest
from detectkit import assert_linear

from qdrant_guard.detect import redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")


def spans(text: str) -> list[tuple[int, int, str, str]]:
    """find_spans of both twins, asserted identical."""
    return assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


# (text, the secret value that must be found and redacted)
POSITIVES = [
    # 1. XML/HTML elements whose tag is a secret name
    ("<password>S3cr3t!pass</password>", "S3cr3t!pass"),
    ("<apiKey>Zk29fjA01kd8Gh3LmQ9x</apiKey>", "Zk29fjA01kd8Gh3LmQ9x"),
    ("<client_secret>q8W#e2R!t6Y@u0I$o4P</client_secret>", "q8W#e2R!t6Y@u0I$o4P"),
    ("<config>\n  <db>\n    <Password>Hq8#kLm2$pQr9</Password>\n  </db>\n</config>", "Hq8#kLm2$pQr9"),
    # 2. name/value pairs
    ('env:\n- name: DB_PASSWORD\n  value: "hunter2-Xy9#Q"\n', "hunter2-Xy9#Q"),
    ("- name: DB_PASSWORD\n  value: hunter2-Xy9#Q\n", "hunter2-Xy9#Q"),
    ("- name: STRIPE_API_KEY\n  value: 'Zk29fjA01kd8Gh3LmQ9x'", "Zk29fjA01kd8Gh3LmQ9x"),
    ('{"name": "api_key", "value": "Zk29fjA01kd8Gh3LmQ9x"}', "Zk29fjA01kd8Gh3LmQ9x"),
    ('[{"Name":"client_secret","Value":"q8W#e2R!t6Y@u0I$o4P"}]', "q8W#e2R!t6Y@u0I$o4P"),
    ('<add key="ApiKey" value="Zk29fjA01kd8Gh3LmQ9x"/>', "Zk29fjA01kd8Gh3LmQ9x"),
    ("<add key='DbPassword' value='Hq8#kLm2$pQr9' />", "Hq8#kLm2$pQr9"),
    # 3. command-line flags, space-separated and with '='
    ("mysql --password Hq8#kLm2pQr9 --host db", "Hq8#kLm2pQr9"),
    ("curl --token Zk29fjA01kd8Gh3LmQ9x https://api", "Zk29fjA01kd8Gh3LmQ9x"),
    ("cli --api-key Zk29fjA01kd8Gh3LmQ9x", "Zk29fjA01kd8Gh3LmQ9x"),
    ('cli --api-key "Zk29fjA01kd8Gh3LmQ9x"', "Zk29fjA01kd8Gh3LmQ9x"),
    ("cli --password=Hq8#kLm2pQr9", "Hq8#kLm2pQr9"),
]

NEGATIVES = [
    "<password><your-password></password>",
    "<password>changeme</password>",
    "<password>xxxxxxxxxxxx</password>",
    "<password>${DB_PASSWORD}</password>",
    "<name>password</name>",
    "<password>S3cr3t!pass</passwd>",  # not the matching closing tag
    "<username>S3cr3t!pass</username>",
    '- name: DB_PASSWORD\n  value: "${DB_PASSWORD}"',
    "- name: DB_PASSWORD\n  value: <your-password>",
    "- name: DB_PASSWORD\n  value: changeme",
    "- name: LOG_LEVEL\n  value: debug",
    "- name: LOG_LEVEL\n  value: Zk29fjA01kd8Gh3LmQ9x",
    "- name: DB_PASSWORD_FILE\n  value: /run/secrets/Xy9#Qdb",
    # the value field belongs to the next list item, not to DB_PASSWORD
    "- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef:\n      name: db\n- name: BUILD\n  value: Zk29fjA01kd8Gh3LmQ9x",
    '{"name": "api_key", "valueFrom": {"value": "Zk29fjA01kd8Gh3LmQ9x"}}',
    '{"name": "api_key", "value": "xxx"}',
    '<add key="ApiKey" value="{{ api_key }}"/>',
    '<add key="LogLevel" value="Zk29fjA01kd8Gh3LmQ9x"/>',
    # the value field is beyond the bounded look-ahead
    "name: db_password\n" + "#" * 250 + "\nvalue: Hq8#kLm2$pQr9",
    "--password xxx",
    "--password <your-password>",
    "--password $DB_PASSWORD",
    "--password --verbose-mode-Xy9",
    "--password-file /etc/app/Xy9#Qdb.pw",
    "--password is required and must be strong",
]


@pytest.mark.parametrize(("text", "secret"), POSITIVES)
def test_split_name_value_secret_is_found_and_redacted(text: str, secret: str) -> None:
    found = spans(text)
    start = text.index(secret)
    assert [(s, e, t) for s, e, t, _ in found] == [(start, start + len(secret), "GENERIC_SECRET")]
    out = redact(text)
    assert secret not in out
    assert out == text[:start] + "[GENERIC_SECRET]" + text[start + len(secret):]


@pytest.mark.parametrize("text", NEGATIVES)
def test_placeholder_or_non_secret_field_is_not_flagged(text: str) -> None:
    assert spans(text) == []
    assert redact(text) == text


def test_positives_inside_larger_documents_keep_other_text() -> None:
    doc = (
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: app\n    env:\n"
        "    - name: LOG_LEVEL\n      value: debug\n"
        "    - name: DB_PASSWORD\n      value: \"hunter2-Xy9#Q\"\n"
        "    - name: REGION\n      value: eu-west-1\n"
    )
    out = redact(doc)
    assert "hunter2-Xy9#Q" not in out
    assert "value: debug" in out and "value: eu-west-1" in out
    spans(doc)


def test_twins_agree_on_truncated_and_non_ascii_variants() -> None:
    bases = [t for t, _ in POSITIVES] + NEGATIVES
    for text in bases:
        for cut in range(len(text) + 1):
            spans(text[:cut])
        spans(text.replace("a", "é"))
        spans("ü" + text + "😀")
    spans("- name: DB_PASSWORD\n  valé: x\n  value: Hq8#kLm2$pQr9")  # non-ASCII stops the look-ahead
    spans("<password>Hq8#kLm2$pQr9</password\x00>")


@pytest.mark.parametrize(
    "unit",
    ["name: db_password " * 1, "<password>", "--password ", "key=api_key value", "- name: x_token\n  "],
)
def test_long_repetitions_stay_linear(unit: str) -> None:
    assert_linear(unit)
    spans(unit * 300)
