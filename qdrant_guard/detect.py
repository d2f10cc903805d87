"""Secret and PII detection, and redaction.

The kernel (native ``qdrant_guard._detect``, or the reference ``qdrant_guard._detect_py`` when
``QDRANT_GUARD_IMPLEMENTATION=python``) finds spans; this module wraps them and redacts.

What is detected (each finding names the check that confirmed it in ``Finding.validator``):

* ``SSN``: ``AAA-GG-SSSS`` or ``AAA GG SSSS``; a bare 9-digit number only when "ssn" or
  "social security" occurs in the 40 characters before it. SSA rules ("ssa-rules"): area not 000,
  666 or 900-999, group not 00, serial not 0000; the advertising numbers 078-05-1120 and
  219-09-9999 are skipped.
* ``CREDIT_CARD``: 13-19 digits, ungrouped or in groups of 4 (last group 1-4) or 4-6-5 / 4-6-4,
  one consistent space or dash separator, a known IIN prefix, Luhn-valid ("luhn"). Published test
  numbers such as 4111 1111 1111 1111 ARE flagged: they are card-shaped data that look real to a
  model and to a human reader.
* ``IBAN``: compact or in space-separated groups of 4, length from the country table, ISO 13616
  mod-97 == 1 ("mod97").
* ``EMAIL``: ``local@domain.tld`` with a letters-only TLD of 2+ characters ("format"); a
  ``user@host`` inside a URL authority is not an e-mail address. Addresses at example.com ARE
  flagged (an address is personal data whatever its domain).
* ``PHONE``: E.164 ``+`` and 8-15 digits, first not 0, optionally space/dash grouped ("e164"); NANP
  ``555-123-4567``, ``555.123.4567``, ``1-555-123-4567``, ``(555) 123-4567`` with an area code
  starting 2-9 ("nanp"). Dates, versions, IPs and bare long integers do not match.
* ``AWS_ACCESS_KEY``: AKIA/ASIA/AGPA/AIDA/AROA/ANPA/ANVA/AIPA + 16 of ``[A-Z2-7]`` ("format").
* ``AWS_SECRET_KEY``: an isolated 40-character ``[A-Za-z0-9+/]`` value with upper, lower and
  digits, not hex, entropy >= 3.5 bits/char and "aws" or "secret" within the 64 characters before
  it ("aws-context"), or without that context entropy >= 4.5 and a ``+`` or ``/`` ("entropy>=4.5").
* ``GITHUB_TOKEN`` (``ghp_ gho_ ghu_ ghs_ ghr_`` + 36 alphanumerics, ``github_pat_`` 22 + ``_`` +
  59), ``GITLAB_TOKEN`` (``glpat-`` + 20-50), ``SLACK_TOKEN`` (``xox[baprs]-`` tokens and
  ``https://hooks.slack.com/services/T.../B.../...`` webhooks), ``STRIPE_KEY`` (``sk_live_
  sk_test_ rk_live_ rk_test_`` + 16+ alphanumerics), ``OPENAI_KEY`` (``sk-`` + 32+ of
  ``[A-Za-z0-9_-]`` with upper, lower and digits, e.g. ``sk-proj-...``): "format".
* ``PRIVATE_KEY``: ``-----BEGIN <label containing PRIVATE KEY>-----`` through the matching END line
  ("pem-armor"); with no END before the next BEGIN, the header and the base64 body that follows
  ("pem-begin").
* ``JWT``: ``eyJ...`` three base64url segments whose first decodes to a JSON-object-shaped text
  with an ``"alg":`` member ("jwt-header-json").
* ``DATABASE_URL_PASSWORD``: the password of ``scheme://user:password@host`` for database and
  broker schemes (postgres, mysql, mariadb, mongodb(+srv), redis(s), amqp(s), mssql, oracle, ...),
  "url-userinfo". Only the password is replaced: ``postgres://app:[DATABASE_URL_PASSWORD]@db/x``
  keeps the host and user, which are useful context and not secret.
* ``GENERIC_SECRET``: a value of 16-256 printable characters without spaces assigned to a name
  with a word like key/secret/token/password/passwd/pwd/pass/auth/credential (``name = "v"``,
  ``name: v``, ``NAME=v``, ``"name": "v"``, ``name := "v"``), with at least two character classes
  and Shannon entropy >= 3.5 bits/char ("entropy>=3.5"). For password-like names (password,
  passwd, pwd, pass, passphrase, pw, passcode) a value of 8+ characters using three of
  lower/upper/digit/symbol is also accepted ("password-charset"): real passwords are often too
  short to reach the entropy threshold. Names ending in a descriptive word (url, path, id, count,
  name, ...) are skipped, as are unquoted identifiers and calls.

Not findings: placeholders (``${PASS}``, ``<token>``, ``****``, ``changeme``, ``your_...``),
anything containing "EXAMPLE" (any case) in a credential, UUIDs, 32/40/64-hex digests and git SHAs
as generic secrets, version strings, ordinary identifiers (``get_api_key_from_env``).

Overlaps: the longer finding wins; on equal length the type earlier in :data:`FINDING_TYPES`
(the more specific credential) wins; then the earlier one. Findings never overlap.

Character classes are ASCII: a secret written with non-ASCII look-alike characters is not found.
``PROPRIETARY`` is not a result of :func:`classify_text`: it is a policy label for content whose
owner says so, and no property of the text reveals it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ._impl import load_kernel

__all__ = [
    "FINDING_TYPES",
    "Finding",
    "classify_text",
    "find_sensitive",
    "redact",
    "redact_with_findings",
]

_kernel = load_kernel("_detect", "_detect_py")

#: Every finding type, strongest first (this order breaks ties between equally long overlaps).
FINDING_TYPES: tuple[str, ...] = tuple(_kernel.FINDING_TYPES)
_PII_TYPES = frozenset(_kernel.PII_TYPES)


@dataclass(frozen=True, slots=True)
class Finding:
    """One sensitive span of a text.

    Attributes:
        type: one of :data:`FINDING_TYPES`, e.g. ``"SSN"``.
        start: offset of the first code point of the span in the text.
        end: offset one past the last code point (``text[start:end]`` is the secret).
        validator: the check that confirmed it, e.g. ``"luhn"``, ``"mod97"``, ``"entropy>=3.5"``.
        category: ``"PII"`` or ``"CREDENTIAL"``.
    """

    type: str
    start: int
    end: int
    validator: str
    category: str


def _check_text(fn: str, text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{fn}() argument 'text' must be str, not {type(text).__name__}")


def find_sensitive(text: str) -> list[Finding]:
    """Find secrets and personal data in a text.

    Args:
        text: any ``str`` (NULs, emoji and lone surrogates are fine).

    Returns:
        Non-overlapping findings sorted by ``(start, end)``; offsets are code points.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    _check_text("find_sensitive", text)
    return [
        Finding(t, s, e, v, "PII" if t in _PII_TYPES else "CREDENTIAL")
        for s, e, t, v in _kernel.find_spans(text)
    ]


def redact_with_findings(text: str) -> tuple[str, list[Finding]]:
    """Replace every finding with ``[TYPE]`` and return the redacted text and the findings.

    Args:
        text: any ``str``.

    Returns:
        ``(redacted, findings)``; the findings' offsets refer to the original ``text``.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    _check_text("redact_with_findings", text)
    findings = find_sensitive(text)
    parts: list[str] = []
    pos = 0
    for f in findings:
        parts.append(text[pos : f.start])
        parts.append(f"[{f.type}]")
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts), findings


def redact(text: str) -> str:
    """Replace every finding with ``[TYPE]``, e.g. ``"SSN 123-45-6789"`` -> ``"SSN [SSN]"``.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    _check_text("redact", text)
    return redact_with_findings(text)[0]


def classify_text(text: str) -> str:
    """Classify a text by the most sensitive thing found in it.

    Returns:
        ``"CREDENTIAL"`` if any credential was found, else ``"PII"`` if any personal data was
        found, else ``"PUBLIC"``. ``"PROPRIETARY"`` is never returned: it is a policy decision
        about ownership that cannot be read from the text.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    _check_text("classify_text", text)
    categories = {f.category for f in find_sensitive(text)}
    if "CREDENTIAL" in categories:
        return "CREDENTIAL"
    return "PII" if "PII" in categories else "PUBLIC"
