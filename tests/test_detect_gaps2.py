"""Second round of secret forms the detector missed: sshpass's ``-p``, redis-cli's ``-a``, the
Dockerfile ``ENV name value`` form and values with spaces inside an element named like a password.

Every case runs through both twins (native and pure-Python reference) via the oracle helper, and
the positives through the public ``redact`` too.
"""
from __future__ import annotations

import random

import pytest

from qdrant_guard.detect import redact
from tests.oracle import assert_same, both

NATIVE, PYTHON = both("detect")

PW = "Hq8#kLm2pQr9"  # 12 characters, four classes: a password by the password-charset rule
KEY = "Zk29fjA01kd8Gh3LmQ9x"  # 20 characters, entropy > 3.5: a secret by the entropy rule


def spans(text: str) -> list[tuple[int, int, str, str]]:
    """find_spans of both twins, asserted identical."""
    return assert_same(NATIVE.find_spans, PYTHON.find_spans, text)


def assert_found(text: str, secret: str, validator: str | None = None) -> None:
    found = spans(text)
    start = text.index(secret)
    assert [(s, e, t) for s, e, t, _ in found] == [(start, start + len(secret), "GENERIC_SECRET")], found
    if validator is not None:
        assert found[0][3] == validator
    assert secret not in redact(text)


# ------------------------------------------------------------------------------------ sshpass
SSHPASS = [
    (f"sshpass -p {PW} ssh deploy@host", PW),
    (f"sshpass -p{PW} ssh deploy@host", PW),
    (f"sshpass -p '{PW}' ssh deploy@host", PW),
    (f'sshpass -p "{PW}" scp a.tgz deploy@host:/srv', PW),
    (f"/usr/bin/sshpass -p {PW} rsync -a src/ host:dst/", PW),
    (f"sshpass -v -p {PW} ssh -p 2222 deploy@host", PW),
    (f"$ sshpass  -p  {KEY} ssh -o StrictHostKeyChecking=no root@10.0.0.5", KEY),
    (f"RUN sshpass -p {PW} ssh-copy-id user@host", PW),
    (f"sshpass -p {PW}/x ssh h", f"{PW}/x"),  # sshpass's -p takes no path: a '/' is part of it
]


@pytest.mark.parametrize(("text", "secret"), SSHPASS)
def test_sshpass_password(text: str, secret: str) -> None:
    assert_found(text, secret)


SSHPASS_NEGATIVES = [
    "sshpass -p $SSHPASS ssh deploy@host",  # a variable, not the password
    'sshpass -p "${DEPLOY_PW}" ssh deploy@host',
    "sshpass -p password ssh deploy@host",  # a placeholder word
    "sshpass -e ssh -p 2222 deploy@host",  # -p of ssh: a port
    f"sshpass -f ~/.pw ssh -p {PW} deploy@host",  # -p after sshpass's command belongs to it
    f"notsshpass -p {PW} x",
    f"ssh -p {PW} deploy@host",
    "sshpass -p secret ssh h",  # too short and plain for the password rules
]


@pytest.mark.parametrize("text", SSHPASS_NEGATIVES)
def test_sshpass_negatives(text: str) -> None:
    assert spans(text) == []


# ---------------------------------------------------------------------------------- redis-cli
REDIS = [
    (f"redis-cli -a {PW} ping", PW),
    (f"redis-cli -h cache.internal -p 6379 -a {PW} ping", PW),
    (f"redis-cli -h cache.internal -p 6379 -a '{PW}' --no-auth-warning info", PW),
    (f"/opt/redis/bin/redis-cli -n 2 -a {KEY} KEYS '*'", KEY),
    (f"docker exec -it cache redis-cli -a {PW} FLUSHALL", PW),
    (f"redis-cli --pass {PW} ping", PW),  # the long form: a flag named like a password
    (f"redis-cli --user app --pass {PW} ping", PW),
]


@pytest.mark.parametrize(("text", "secret"), REDIS)
def test_redis_cli_password(text: str, secret: str) -> None:
    assert_found(text, secret)


REDIS_NEGATIVES = [
    "redis-cli -h cache.internal -p 6379 ping",  # -p is the port
    "redis-cli -p 6379 -a $REDIS_PASSWORD ping",
    "redis-cli -a \"$(cat /run/secrets/redis)\" ping",
    f"ls -a {PW}",  # -a of other tools
    f"git commit -a -m {PW}",
    f"redis-cli info | grep -a {PW}",  # -a of the next command in a pipeline
    f"redis-cli ping; uname -a {PW}",
    f"redis-cli -a{PW} ping",  # redis-cli reads an attached value as an unknown option
    f"myredis-cli -a {PW} ping",
    f"redis-cli\n-a {PW}",  # another line
]


@pytest.mark.parametrize("text", REDIS_NEGATIVES)
def test_redis_cli_negatives(text: str) -> None:
    assert spans(text) == []


# ------------------------------------------------------------------------ -p stays conservative
@pytest.mark.parametrize(
    "text",
    [
        "mysql -p dbname",  # mysql reads a spaced value as the database name
        "mysql -u root -p MyDatabase2024",
        f"mysql -u root -p {PW}",
        "ssh -p 2222 deploy@host",
        "mkdir -p build/Release2024x",
        "redis-cli -h host -p 6379 -a",  # -a with nothing after it
        f"scp -P 2222 -p {PW} host:x .",
    ],
)
def test_other_short_p_flags_stay_unflagged(text: str) -> None:
    assert spans(text) == []


# ------------------------------------------------------------------------- Dockerfile ENV/ARG
DOCKER = [
    (f"ENV DB_PASSWORD {PW}", PW),  # the legacy form: name, space, value (no '=')
    (f"FROM python:3.12\nENV DB_PASSWORD {PW}\nRUN make\n", PW),
    (f"  ENV\tAPI_TOKEN\t{KEY}\r\nEXPOSE 80", KEY),
    (f"env DB_PASSWORD {PW}", PW),  # Docker reads instructions in any case
    (f'ENV DB_PASSWORD "{PW}"', PW),
    (f"ENV DB_PASSWORD '{PW}'   \n", PW),
    (f"ENV DB_PASSWORD {PW},x;(y)", f"{PW},x;(y)"),  # the value is the whole rest of the line
    # the '=' forms were already found; kept here so they stay so
    (f"ENV DB_PASSWORD={PW}", PW),
    (f"ARG DB_PASSWORD={PW}", PW),
    (f"ENV APP_ENV=prod DB_PASSWORD={PW}", PW),
]


@pytest.mark.parametrize(("text", "secret"), DOCKER)
def test_dockerfile_env(text: str, secret: str) -> None:
    assert_found(text, secret)


DOCKER_NEGATIVES = [
    "ENV DB_PASSWORD_FILE /run/secrets/db_password",  # names a file, and the value is a path
    "ENV DB_PASSWORD ${DB_PASSWORD}",
    "ENV DB_PASSWORD changeme",
    "ENV API_TOKEN_URL https://auth.example.io/token",
    f"ENV DB_PASSWORD {PW} \\",  # a continued line: the value runs on (not taken, see the docs)
    f"ENV DB_PASSWORD my {PW}",  # a value with spaces is not taken (as for NAME=value)
    f"ENV PATH /usr/local/{PW}/bin",
    "ARG DB_PASSWORD",
    f"RUN echo ENV DB_PASSWORD {PW}",  # not an instruction: ENV is not at the line's start
    f"Set the environment: ENV DB_PASSWORD {PW}",
    f"DEV DB_PASSWORD {PW}",
    f"ENVIRONMENT DB_PASSWORD {PW}",
    "env:\n  DB_PASSWORD: ${{ secrets.DB }}",
    "env = os.environ.copy()",
]


@pytest.mark.parametrize("text", DOCKER_NEGATIVES)
def test_dockerfile_env_negatives(text: str) -> None:
    assert spans(text) == []


# ------------------------------------------------------------- spaced values inside elements
ELEMENTS = [
    ("<password>correct horse battery staple</password>", "correct horse battery staple", "passphrase"),
    ("<Password>purple monkey dishwasher lamp</Password>", "purple monkey dishwasher lamp", "passphrase"),
    ("<db_password>Tr0ub4dor and 3 more</db_password>", "Tr0ub4dor and 3 more", None),  # 'and' is prose...
    ("<passphrase>Tr0ub4dor &3x</passphrase>", "Tr0ub4dor &3x", "passphrase"),  # ...but 2 words pass
    ('<input name="password" class="Form1-Input">Hq8 kLm2pQr9</input>', "Hq8 kLm2pQr9", "passphrase"),
    ('<entry key="db.password">correct horse battery staple</entry>', "correct horse battery staple", "passphrase"),
    ("<password><![CDATA[correct horse battery staple]]></password>", "correct horse battery staple", "passphrase"),
    ("<password> correct horse battery staple </password>", "correct horse battery staple", "passphrase"),
    (f"<password> {PW} </password>", PW, "password-charset"),  # spaces around a value are not part of it
    # any secret name: a word that is a key by itself takes the whole value
    (f"<api_key>{KEY} (rotated 2026-11)</api_key>", f"{KEY} (rotated 2026-11)", "entropy>=3.5"),
    (f"<client_secret>prod: {KEY}</client_secret>", f"prod: {KEY}", "entropy>=3.5"),
    (f"<token>Bearer {KEY}</token>", f"Bearer {KEY}", "entropy>=3.5"),
]


@pytest.mark.parametrize(("text", "secret", "validator"), ELEMENTS)
def test_spaced_element_value(text: str, secret: str, validator: str | None) -> None:
    if validator is None:
        assert spans(text) == []
        return
    assert_found(text, secret, validator)


ELEMENT_NEGATIVES = [
    "<password>your password here</password>",  # placeholders and prose
    "<password>Enter the admin password</password>",
    "<password>not set</password>",
    "<password>same as the database one</password>",
    "<password>see vault</password>",  # under 12 characters
    "<password>changeme please now</password>",
    "<password>Stored in Vault since 2024</password>",
    "<password>Login Page Loads Correctly</password>",  # capitalised words, no digit
    "<password>correct horse battery staple foo bar baz qux quux</password>",  # more than 8 words
    "<password>correct  horse  battery</password>",  # double spaces: not one passphrase
    "<password>correct horse\nbattery staple</password>",  # another line
    "<password>correct horse battery staple</passwd>",  # does not close with its own tag
    "<password>${DB_PASS} or default</password>",
    # names that are secret-like but not password-like need a word that is a key by itself
    "<key>Track ID</key>",  # plist / iTunes library keys
    "<key>Application Category Type</key>",
    "<token>New York City</token>",
    "<api_key>correct horse battery staple</api_key>",
    "<secret>object.__ior__(self, other)</secret>",  # code: a call is not a key
    "<api_key>Numeric_Type=Digit or Decimal</api_key>",  # no digit in the word
    "<username>correct horse battery staple</username>",  # not a secret name
    "<description>correct horse battery staple</description>",
]


@pytest.mark.parametrize("text", ELEMENT_NEGATIVES)
def test_spaced_element_negatives(text: str) -> None:
    assert spans(text) == []


def test_assigned_values_with_spaces_stay_unflagged() -> None:
    # Outside elements a quoted value with spaces is a message more often than a passphrase
    # (PASSWORD_HELP = "Use at least 12 characters"): still not taken (docs/threat-model.md).
    assert spans('password = "correct horse battery staple"') == []
    assert spans("password: correct horse battery staple") == []


# ------------------------------------------------------------------------------ twin agreement
PIECES = [
    "sshpass", "redis-cli", "/usr/bin/", " ", "  ", "\n", "\t", "-p", "-a", "-v", "-h", "-u", "--pass", "-e",
    "host", "6379", PW, KEY, "ENV", "env", "En", "ARG", "DB_PASSWORD", "API_TOKEN", "\r\n", "\\",
    "<password>", "</password>", "<api_key>", "</api_key>", "<![CDATA[", "]]>", "correct", "horse", "the", "Tr0ub4dor",
    "&3x", ".", ",", "(", "<key>", "</key>", "'", '"', "|", ";", "&", "(", ")", "`", "$X", "ssh", "x", "=", "\u00e9", "\U0001F600",
]


def test_twins_agree_on_the_new_forms() -> None:
    """Seeded random texts built from the pieces of every new form: both twins give the same spans."""
    rnd = random.Random(20261204)
    for _ in range(5000):
        spans("".join(rnd.choice(PIECES) for _ in range(rnd.randint(1, 30))))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # escaped newlines: the decoded view puts ENV at a line's start
        ('{"dockerfile": "FROM x\\nENV DB_PASSWORD Hq8#kLm2pQr9\\nRUN y"}',
         '{"dockerfile": "FROM x\\nENV DB_PASSWORD [GENERIC_SECRET]\\nRUN y"}'),
        # HTML-escaped tags
        ("&lt;password&gt;correct horse battery staple&lt;/password&gt;",
         "&lt;password&gt;[GENERIC_SECRET]&lt;/password&gt;"),
        # a percent-encoded character inside sshpass's password
        ("sshpass -p Hq8%23kLm2pQr9 ssh h", "sshpass -p [GENERIC_SECRET] ssh h"),
    ],
)
def test_new_forms_through_the_decoded_views(text: str, expected: str) -> None:
    assert redact(text) == expected
