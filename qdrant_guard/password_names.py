"""Password names: whether a payload key (or its path, or a sibling's name) names a password, PIN
or passphrase, so its value is refused whatever its entropy, and the sentence a refusal gives.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Mapping

from . import detect as _detect


# In a structured payload the key is explicit: a value under a password name is a password,
# whatever its entropy (the detector, reading free text, needs three classes or entropy >= 3.5).
# "token", "secret" and "key" keep the detector's rules ({"token": "the"} in NLP payloads).
_PASSWORD_WORDS = ("password", "passwd", "passphrase", "passcode", "pwd")
# Abbreviations that name nothing but a password as the last word (``db_pw``, ``PW``, ``smtpPswd``).
_PASSWORD_SHORT = frozenset({"pw", "pswd", "pword"})
# "pass" names a password after the account or service it opens (``db_pass``, ``SMTP_PASS``,
# ``mysql_root_pass``), and so does a bare "pass" key in an object under such a name (nodemailer's
# ``{"auth": {"user": u, "pass": p}}``, ``{"smtp": {"pass": p}}``: read as ``auth.pass``); alone or
# after any other word it is as often a ticket, a round or a result (``{"pass": "first"}``,
# ``boarding_pass``, ``day_pass``, ``first_pass``). A list of the senses that are no password could
# never be complete, and each miss would refuse ordinary data; a miss here leaves a password to the
# detector, as before.
_PASS_OWNERS = frozenset({
    "db", "database", "sql", "mysql", "mariadb", "pg", "postgres", "postgresql", "psql", "mssql", "oracle",
    "mongo", "mongodb", "redis", "rabbitmq", "amqp", "mq", "kafka", "sasl", "elastic", "es", "jdbc", "ldap",
    "bind", "smtp", "imap", "pop", "pop3", "mail", "email", "ftp", "sftp", "ssh", "vnc", "rdp", "vpn",
    "wifi", "wlan", "router", "user", "username", "usr", "admin", "root", "sudo", "master", "login",
    "logon", "account", "acct", "auth", "api", "app", "client", "service", "svc", "keystore", "truststore",
    "key", "cert", "registry", "docker", "git", "repo", "web", "http", "basic", "credential", "credentials", "creds",
})
# A bare "pass" or "pin" key, read under its object's name (``{"auth": {"pass": p}}`` as
# ``auth.pass``, ``{"card": {"pin": p}}`` as ``card.pin``): these spellings are looked up as they
# are; any other (``pass1``, ``ＰＡＳＳ``, ``_pin``) is never remembered as a clean key (_bare_word).
_BARE_EXACT = {"pass": "pass", "PASS": "pass", "Pass": "pass", "pin": "pin", "PIN": "pin", "Pin": "pin"}
# "pin" only after what it unlocks: alone it is also India's postal code (``{"pin": "560001"}``),
# and ``map_pin`` or ``pin_code`` (a postal code again) name no secret.
_PIN_OWNERS = frozenset({"card", "sim", "atm", "debit", "credit", "bank", "account", "login", "security",
                         "access", "unlock", "wallet", "phone", "device"})
# A bare "pin" key is read as a PIN only in an object named for a card or a SIM (``{"card": {"pin":
# p}}``); under a device, phone or account it is as often a GPIO pin or a postal code
# (``{"device": {"pin": 13}}``, ``{"account": {"address": ..., "pin": "560001"}}``).
_BARE_PIN_OWNERS = frozenset({"card", "sim", "atm", "debit", "credit", "bank"})
# Keys beside a bare "pass" that make a number under it a tally of test results (``{"api": {"pass":
# 120, "fail": 3}}``): a password is not stored beside a count of failures (_tally).
_TALLY_KEYS = frozenset({"fail", "failed", "fails", "failure", "failures", "skip", "skipped", "skips", "error",
                         "errors", "xfail", "xfailed", "broken", "total", "warn", "warning", "warnings"})
# Keys of an object under a password name that hold the password itself (``{"password": {"value":
# p}}``, ``{"db_password": {"current": p, "new": q}}``): a key made only of these words, or one of
# no word or one character (``{"x": p}``, ``{"0": p}``). Any other key describes the password and
# is read under its own name (``min_length``, ``algorithm``, ``hash``, and JSON Schema's ``type``,
# ``title``, ``description``, ``format``).
_HOLDER_WORDS = frozenset({"value", "val", "v", "plain", "plaintext", "clear", "cleartext", "secret", "current",
                           "new", "old", "previous", "confirm", "confirmation", "initial", "temp", "temporary",
                           "default", "raw", "data", "text", "string", "str"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Not a password: placeholders such as "[REDACTED]", "<your password>", "${DB_PASSWORD}",
# "{{ db_password }}", and the guard's own "[GENERIC_SECRET]" (empty and one-character runs apart).
_PLACEHOLDER = re.compile(r"\[[A-Za-z_ .-]+\]|<[A-Za-z_ .-]+>|\$\{[A-Za-z0-9_]+\}|\{\{ ?[A-Za-z0-9_.]+ ?\}\}")


# One key of a Qdrant key path: quoted, or up to the next "." or "["; an index ("[0]", "[]") aside.
_PATH_PART = re.compile(r'"([^"]*)"|\[[^\]]*\]|([^.\["]+)')
# An absolute or home-relative POSIX path without spaces.
_PATH_VALUE = re.compile(r"~?/\S*\Z")


def _name_words(name: str) -> list[str]:
    """The words of a field name, read as the detector reads text: full-width and other compatibility
    forms as ASCII (NFKC) and invisible format characters dropped (``ＰＡＳＳＷＯＲＤ``,
    ``pass<ZWSP>word``). Look-alike letters of other scripts stay what they are, as for the detector."""
    if not name.isascii():
        name = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf")
    return _WORDS.findall(name)


def _drop_digits(words: list[str]) -> list[str]:
    """``words`` without its trailing digit words (``userPassword2``, ``db2``), in place."""
    while words and words[-1].isdigit():
        words.pop()
    return words


def _last_word(name: str) -> str:
    """``name``'s last word in lower case, trailing digits aside (``userPassword2``: ``password``);
    empty when it has none."""
    words = _drop_digits(_name_words(name))
    return words[-1].lower() if words else ""


def _password_name(name: str) -> bool:
    """True when ``name``'s last word (snake_case, kebab-case, dotted or camelCase; trailing digits
    aside; :func:`_name_words`) is a password word, or ends with one other than ``pwd``
    (``dbpassword``): ``password``, ``DB_PASSWORD``, ``userPassword2``, ``adminpasswd``, ``pwd``;
    or ``pw``, ``pswd``, ``pword`` (``db_pw``, ``PW``); or ``word``/``phrase``/``code`` after a
    ``pass`` that is the first word or a password name itself (``pass_word``, ``pass-word``,
    ``db_pass_code``; not ``boarding_pass_code``); or ``pass`` after an account or service word
    (``_PASS_OWNERS``: ``db_pass``, ``SMTP_PASS``, ``admin_pass``); or ``pin`` after what it unlocks
    (``_PIN_OWNERS``: ``card_pin``, ``SIM_PIN``). Not ``password_policy``, ``passwordHash``,
    ``passwords`` (a count as often as a list), ``pass``, ``boarding_pass``, ``first_pass``,
    ``bypass``, ``passport``, ``pin``, ``map_pin``, ``pin_code``."""
    words = _drop_digits(_name_words(name))
    if not words:
        return False
    last = words[-1].lower()
    if last in _PASSWORD_WORDS or last.endswith(_PASSWORD_WORDS[:4]) or last in _PASSWORD_SHORT:
        return True
    if last not in ("pass", "word", "phrase", "code", "pin"):
        return False
    words.pop()
    _drop_digits(words)  # db2_pass: the word before the digits
    before = words[-1].lower() if words else ""
    if last == "pass":
        return before in _PASS_OWNERS
    if last == "pin":
        return before in _PIN_OWNERS
    # pass_word, db_pass_code; not boarding_pass_code (a ticket's code).
    return before == "pass" and (len(words) < 2 or _password_name("_".join(words)))


def _holder_key(key: str) -> bool:
    """Whether ``key``, in an object under a password name, holds the password (``_HOLDER_WORDS``)."""
    if len(key) <= 1:
        return True
    words = _name_words(key)
    return all(w.isdigit() or w.lower() in _HOLDER_WORDS for w in words)


def _path_names(path: str) -> list[str]:
    """The keys of a Qdrant key path (``creds.password``, ``env[0].value``, ``"a.b".c``), indexes aside."""
    return [m.group(1) if m.group(1) is not None else m.group(2) for m in _PATH_PART.finditer(path)
            if m.group(1) is not None or m.group(2)]


def _bare_word(key: str) -> str:
    """``pass`` or ``pin`` when ``key`` is that word alone, in any spelling :func:`_password_name`
    reads (``PASS``, ``pass2``, ``_pin``, full-width or with invisible characters); else ``""``."""
    words = _drop_digits(_name_words(key))
    word = words[0].lower() if len(words) == 1 else ""
    return word if word in ("pass", "pin") else ""


def _held_name(parent: str, key: str) -> str | None:
    """The password name a bare ``pass``/``pin`` ``key`` of an object under ``parent`` is read under
    (``auth.pass``, ``user.pass2``: ``_PASS_OWNERS``; ``card.pin``: ``_BARE_PIN_OWNERS``), None for
    any other key or parent."""
    word = _BARE_EXACT.get(key) or _bare_word(key)
    if word == "pin" and _last_word(parent) not in _BARE_PIN_OWNERS:
        return None
    held = f"{parent}.{key}"
    return held if word and _password_name(held) else None


def _tally(obj: Mapping[Any, Any], v: Any) -> bool:
    """Whether ``v``, under a bare ``pass`` key of ``obj``, is a count of test results: a number
    (not a bool) beside a ``fail``/``skip``/``error``/``total`` key (``_TALLY_KEYS``, any case).
    YAML's ``db: {pass: 12345678}`` has no such sibling and stays a password."""
    if type(v) is bool or not isinstance(v, (int, float)):
        return False
    return any(isinstance(x, str) and x.lower() in _TALLY_KEYS for x in obj)


def path_password_name(path: str) -> str | None:
    """The password name a value at key path ``path`` is read under, None when there is none: its
    last key when that is a password name (:func:`_password_name`; a bare ``pass`` under an account
    or service name as ``auth.pass``), or the password name an object of it holds the value under
    (``password.value``, ``db_password.x``: :func:`_holder_key`)."""
    names = _path_names(path) or [path]
    for i in range(len(names) - 1, -1, -1):
        if _password_name(names[i]):
            return names[i]
        if i and _held_name(names[i - 1], names[i]):
            return f"{names[i - 1]}.{names[i]}"
        if i == 0 or not _holder_key(names[i]):
            return None
    return None


def _placeholder(value: str) -> bool:
    return not value or value == value[0] * len(value) or _PLACEHOLDER.fullmatch(value) is not None


def _working_directory(name: str, value: str) -> bool:
    """``{"PWD": "/home/alice"}``: an environment dump's working directory, not a password."""
    return _PATH_VALUE.match(value) is not None and _name_words(name)[-1].lower() in ("pwd", "oldpwd")


def password_finding(start: int, end: int) -> _detect.Finding:
    """The finding the password-name rule gives a value at ``start:end`` (GENERIC_SECRET, validator
    ``password-name``): the payload screen and filters report it alike."""
    return _detect.Finding("GENERIC_SECRET", start, end, "password-name", "CREDENTIAL")


def password_value(name: str, value: str) -> bool:
    """Whether ``value`` given under field ``name`` (a key path: :func:`path_password_name`) is a
    password by the password-name rule (a password name, not a placeholder, not a working directory
    under ``pwd``): what the payload screen finds besides the detector, and so do filters (a match
    on a password field names one, as does one on ``password.value``)."""
    held = path_password_name(name)
    return held is not None and not _placeholder(value) and not _working_directory(held, value)


def password_name_why(name: str, verb: str = "store") -> str:
    """What a refusal by the password-name rule adds: which name made the value a password (a
    sibling ``name`` field is not in the value's path) and how to store a flag or a label under it,
    since the detector's ``GENERIC_SECRET`` alone does not say why ``"yes"`` is one."""
    return (f". The value is read under the password name {_detect.redact(name)!r}: any value under a "
            "field named for a password (its last word) is taken as a password, a flag such as \"yes\" "
            "or a label too, but for placeholders (\"\", \"********\", \"[REDACTED]\", \"${VAR}\"); "
            f"{verb} a flag as true/false, or name the field for what it holds")
