"""Write tests/data/planted_secrets.jsonl: texts with planted secrets and PII, and negatives.

Every value is freshly generated (seeded) in the shape of the real thing: keys with the right
prefixes and alphabets, Luhn-valid card numbers, SSA-valid SSNs, IBANs with correct mod-97 check
digits, a real RSA private key, HMAC-signed JWTs. The expected spans come from where this script
plants each value, never from a detector. Some positives are deliberately hard (a passphrase with
spaces, a secret in a prose sentence) so recall can fall short of 1.

Run: python tests/data/planted_secrets_gen.py  (rewrites the .jsonl next to this file; the RSA and
EC keys are new on every run). ``--append`` adds only the rows of the newest round,
:func:`vendor_rows`, to the existing file, leaving its rows as they are.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import string
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

OUT = Path(__file__).with_name("planted_secrets.jsonl")
R = random.Random(20240611)
ALNUM = string.ascii_letters + string.digits


def rand(alphabet: str, n: int) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def mixed(alphabet: str, n: int) -> str:
    while True:
        v = rand(alphabet, n)
        if any(c.islower() for c in v) and any(c.isupper() for c in v) and any(c.isdigit() for c in v):
            return v


# ------------------------------------------------------------------------------ generators
def aws_access_key() -> str:
    return R.choice(["AKIA", "ASIA"]) + rand(string.ascii_uppercase + "234567", 16)


def aws_secret_key() -> str:
    return mixed(ALNUM + "+/", 40)


def github_token() -> str:
    return R.choice(["ghp_", "gho_", "ghs_"]) + rand(ALNUM, 36)


def github_pat() -> str:
    return "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59)


def gitlab_token() -> str:
    return "glpat-" + rand(ALNUM + "_-", 20)


def slack_token() -> str:
    return f"xox{R.choice('bp')}-{rand(string.digits, 12)}-{rand(string.digits, 13)}-{rand(ALNUM, 24)}"


def slack_webhook() -> str:
    return (
        "https://hooks.slack.com/services/T" + rand(string.ascii_uppercase + string.digits, 8)
        + "/B" + rand(string.ascii_uppercase + string.digits, 10) + "/" + rand(ALNUM, 24)
    )


def stripe_key() -> str:
    return R.choice(["sk_live_", "rk_live_", "sk_test_"]) + rand(ALNUM, 24)


def openai_key() -> str:
    return R.choice(["sk-proj-", "sk-"]) + mixed(ALNUM, 48)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt() -> str:
    header = b64url(json.dumps({"alg": R.choice(["HS256", "HS512"]), "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"sub": str(R.randrange(10**6)), "name": "Jo", "iat": 1700000000 + R.randrange(10**6)}).encode())
    sig = b64url(hmac.new(rand(ALNUM, 32).encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest())
    return f"{header}.{payload}.{sig}"


_RSA = rsa.generate_private_key(public_exponent=65537, key_size=1024)
_EC = ec.generate_private_key(ec.SECP256R1())


def pem_key(kind: str) -> str:
    key = _RSA if kind == "rsa" else _EC
    fmt = serialization.PrivateFormat.TraditionalOpenSSL if kind == "rsa" else serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode().strip()


def password() -> str:
    return mixed(ALNUM + "!#%^*", R.randint(14, 22))


def generic_secret() -> str:
    return mixed(ALNUM + "_-", R.randint(24, 40))


def ssn() -> str:
    while True:
        area = R.randint(1, 899)
        if area != 666:
            return f"{area:03d}-{R.randint(1, 99):02d}-{R.randint(1, 9999):04d}"


def luhn_complete(prefix: str, length: int) -> str:
    body = prefix + rand(string.digits, length - len(prefix) - 1)
    for check in string.digits:
        digits = body + check
        total = 0
        for k, ch in enumerate(reversed(digits)):
            v = int(ch) * (2 if k % 2 else 1)
            total += v - 9 if v > 9 else v
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


def card() -> str:
    prefix, length = R.choice([("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("6011", 16), ("37", 15)])
    d = luhn_complete(prefix, length)
    if length == 15:
        return f"{d[:4]} {d[4:10]} {d[10:]}"
    sep = R.choice([" ", "-", ""])
    return sep.join(d[k : k + 4] for k in range(0, 16, 4))


def iban() -> str:
    cc, bban = R.choice([("DE", rand(string.digits, 18)), ("GB", "WEST" + rand(string.digits, 14)), ("FR", rand(string.digits, 23))])
    numeric = "".join(str(int(c, 36)) for c in bban + cc + "00")
    check = 98 - int(numeric) % 97
    compact = f"{cc}{check:02d}{bban}"
    if R.random() < 0.5:
        return " ".join(compact[k : k + 4] for k in range(0, len(compact), 4))
    return compact


FIRST = ["alice", "bob", "carol", "dmitri", "eve", "farah", "gustavo", "hana", "ivan", "jun"]
LAST = ["smith", "okafor", "nguyen", "schmidt", "garcia", "kowalski", "tanaka", "haddad"]
DOMAINS = ["acme-corp.com", "mail.globex.io", "initech.co.uk", "umbrella.net", "hooli.dev"]


def email() -> str:
    return f"{R.choice(FIRST)}.{R.choice(LAST)}{R.choice(['', str(R.randint(1, 99))])}@{R.choice(DOMAINS)}"


def phone() -> str:
    area = R.randint(201, 989)
    return R.choice([
        f"({area}) {R.randint(200, 999)}-{R.randint(0, 9999):04d}",
        f"{area}-{R.randint(200, 999)}-{R.randint(0, 9999):04d}",
        f"+1 {area} {R.randint(200, 999)} {R.randint(0, 9999):04d}",
        f"+44 20 {R.randint(1000, 9999)} {R.randint(1000, 9999)}",
    ])


# ------------------------------------------------------------------------------ assembly
class Doc:
    """A text under construction that remembers where each planted value sits."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.parts: list[str] = []
        self.expected: list[dict] = []
        self.pos = 0

    def add(self, s: str) -> "Doc":
        self.parts.append(s)
        self.pos += len(s)
        return self

    def plant(self, type_: str, value: str) -> "Doc":
        self.expected.append({"type": type_, "start": self.pos, "end": self.pos + len(value), "value": value})
        return self.add(value)

    def row(self) -> dict:
        return {"kind": self.kind, "text": "".join(self.parts), "expected": self.expected}


def code_python() -> Doc:
    d = Doc("code")
    choice = R.randrange(6)
    if choice == 0:
        d.add('import boto3\n\nclient = boto3.client(\n    "s3",\n    aws_access_key_id="').plant("AWS_ACCESS_KEY", aws_access_key())
        d.add('",\n    aws_secret_access_key="').plant("AWS_SECRET_KEY", aws_secret_key()).add('",\n)\n')
    elif choice == 1:
        d.add("from github import Github\n\ngh = Github(\"").plant("GITHUB_TOKEN", github_token()).add("\")\nrepo = gh.get_repo('org/app')\n")
    elif choice == 2:
        d.add("import stripe\nstripe.api_key = '").plant("STRIPE_KEY", stripe_key()).add("'\ncharge = stripe.Charge.create(amount=2000)\n")
    elif choice == 3:
        d.add("from openai import OpenAI\nclient = OpenAI(api_key=\"").plant("OPENAI_KEY", openai_key()).add("\")\n")
    elif choice == 4:
        d.add("engine = create_engine('postgresql+psycopg2://svc_app:").plant("DATABASE_URL_PASSWORD", password())
        d.add("@pg-primary.internal:5432/orders')\n")
    else:
        d.add("SECRET_KEY = \"").plant("GENERIC_SECRET", generic_secret()).add("\"\nDEBUG = False\nALLOWED_HOSTS = ['*']\n")
    return d


def code_js() -> Doc:
    d = Doc("code")
    if R.random() < 0.5:
        d.add("const slack = new WebClient('").plant("SLACK_TOKEN", slack_token()).add("');\nawait slack.chat.postMessage({ channel: '#ops', text: 'deploy ok' });\n")
    else:
        d.add("const headers = {\n  Authorization: `Bearer ").plant("JWT", jwt()).add("`,\n  'Content-Type': 'application/json',\n};\n")
    return d


def config_env() -> Doc:
    d = Doc("config")
    d.add("# production settings\nNODE_ENV=production\nDATABASE_URL=mysql://root:").plant("DATABASE_URL_PASSWORD", password()).add("@10.0.3.7:3306/shop\n")
    d.add("GITLAB_TOKEN=").plant("GITLAB_TOKEN", gitlab_token()).add("\n")
    d.add("AWS_ACCESS_KEY_ID=").plant("AWS_ACCESS_KEY", aws_access_key()).add("\n")
    d.add("AWS_SECRET_ACCESS_KEY=").plant("AWS_SECRET_KEY", aws_secret_key()).add("\nLOG_LEVEL=info\n")
    return d


def config_yaml() -> Doc:
    d = Doc("config")
    d.add("notifications:\n  slack:\n    webhook_url: ").plant("SLACK_TOKEN", slack_webhook()).add("\n")
    d.add("  smtp:\n    host: smtp.mailgun.org\n    password: ").plant("GENERIC_SECRET", password()).add("\n")
    d.add("cache:\n  url: redis://:").plant("DATABASE_URL_PASSWORD", password()).add("@cache.internal:6379/0\n")
    return d


def config_json() -> Doc:
    d = Doc("config")
    d.add('{\n  "service": "billing",\n  "client_secret": "').plant("GENERIC_SECRET", generic_secret()).add('",\n')
    d.add('  "github": {"token": "').plant("GITHUB_TOKEN", github_pat()).add('"},\n  "retries": 3\n}\n')
    return d


def pem_doc() -> Doc:
    d = Doc("config")
    d.add("Here is the deploy key, keep it safe:\n\n").plant("PRIVATE_KEY", pem_key(R.choice(["rsa", "ec"]))).add("\n\nthanks\n")
    return d


def chat() -> Doc:
    d = Doc("chat")
    choice = R.randrange(7)
    if choice == 0:
        d.add("hey can you try with my token ").plant("GITHUB_TOKEN", github_token()).add(" ? CI keeps failing on main")
    elif choice == 1:
        d.add("sure, my SSN is ").plant("SSN", ssn()).add(" and you can reach me at ").plant("PHONE", phone()).add(" after 5pm")
    elif choice == 2:
        d.add("Paid with card ").plant("CREDIT_CARD", card()).add(", exp 09/27, please refund to IBAN ").plant("IBAN", iban()).add(" instead.")
    elif choice == 3:
        d.add("the staging db is postgres://admin2:").plant("DATABASE_URL_PASSWORD", password()).add("@staging-db:5432/app fyi")
    elif choice == 4:
        d.add("ping ").plant("EMAIL", email()).add(" or call ").plant("PHONE", phone()).add(" if the pager is down")
    elif choice == 5:
        d.add("use this key for the demo: ").plant("OPENAI_KEY", openai_key()).add(" (rotate after!)")
    else:
        d.add("JWT for the test user: ").plant("JWT", jwt()).add("\nexpires tomorrow")
    return d


def email_doc() -> Doc:
    d = Doc("email")
    d.add("From: ").plant("EMAIL", email()).add("\nTo: ").plant("EMAIL", email()).add("\nSubject: onboarding\n\n")
    d.add("Hi,\n\nWelcome aboard! For payroll we have your SSN as ").plant("SSN", ssn())
    d.add(" and your account ").plant("IBAN", iban()).add(".\nIf anything is wrong call HR at ").plant("PHONE", phone())
    d.add(".\n\nBest,\nPeople Ops\n")
    return d


def hard_positive(k: int) -> Doc:
    """Secrets a human would redact but a shape-based detector may miss."""
    d = Doc("hard")
    if k == 0:
        d.add("wifi password: ").plant("GENERIC_SECRET", "purple monkey dishwasher 42").add("\n")
    elif k == 1:
        d.add("the root pw is ").plant("GENERIC_SECRET", password()).add(" don't share it\n")
    elif k == 2:
        d.add("aws key ").plant("AWS_ACCESS_KEY", aws_access_key()).add(" secret ").plant("AWS_SECRET_KEY", mixed(ALNUM, 40)).add("\n")
    else:
        d.add("social: ").plant("SSN", ssn().replace("-", "")).add("\n")
    return d


NEGATIVES = [
    "def get_api_key_from_env():\n    return os.environ[\"API_KEY\"]\n\napi_key = get_api_key_from_env()\n",
    "token_count = 4096\npassword_reset_url = \"https://app.acme-corp.com/account/password/reset\"\n",
    "AWS example from the docs: AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
    "request id 550e8400-e29b-41d4-a716-446655440000 took 31 ms\n",
    "fixed in commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (see 1b2c3d4)\n",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n",
    "md5 d41d8cd98f00b204e9800998ecf8427e  README.md\n",
    "Released v2.0.1-rc1 on 2024-03-15; upgrade from 1.9.12 recommended.\n",
    "Server listens on 192.168.10.254:8080 and 10.0.0.1\n",
    "password = os.getenv('DB_PASSWORD')\nsecret: ${VAULT_SECRET}\napi_key: <your-api-key>\n",
    "DATABASE_URL=postgres://user:password@localhost:5432/dev\nREDIS_URL=redis://:****@cache:6379\n",
    "MYSQL_URL=mysql://app:${MYSQL_PASSWORD}@db:3306/app\n",
    "The meeting is on 12/05/2024 at 10:30, room 4.12, budget 1,250,000 USD.\n",
    "Order #1029384756 shipped; tracking 1Z999AA10123456784.\n",
    "SSN format is AAA-GG-SSSS, e.g. 000-12-3456 is never issued, nor 666-45-6789 or 912-34-5678.\n",
    "Famous ad SSN 078-05-1120 appeared in wallets in 1938; 219-09-9999 too.\n",
    "invalid card 4111 1111 1111 1112 fails the checksum\n",
    "IBAN with a bad checksum: DE88 3704 0044 0532 0130 00\n",
    "Use the decorator @property and @staticmethod; see user@localhost.\n",
    "x = 3.14159265358979; y = 2.71828182845904; n = 6022140857\n",
    "const authorHeader = getHeader('Authorization');\nlet primaryKeyName = 'user_id';\n",
    "for token in tokenizer.tokenize(text):\n    token_ids.append(vocab[token])\n",
    "The secret to good bread is patience and a hot oven.\n",
    "key: value\nkeyboard_layout: us-international\nmonkey_patch_enabled: true\n",
    "git log --oneline | head -20 && git show HEAD~3:src/main.rs\n",
    "Tel: 12345, ext. 678. Version 10.4.2.1 build 20240115.\n",
    "api_token: changeme\nsecret_key: xxxxxxxxxxxxxxxxxxxxxxxx\nauth_token: \"REDACTED\"\n",
    "ghp_ prefix marks classic GitHub tokens; sk_live_ marks Stripe live keys.\n",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n",
    "-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAKHBfpE\n-----END CERTIFICATE-----\n",
    "eyJ is how base64 of '{\"' starts; eyJhbGciOi is the usual JWT header prefix.\n",
    "ISBN 978-3-16-148410-0 and DOI 10.1000/182\n",
    "Coordinates 48.8566, 2.3522; elevation 35 m.\n",
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36\n",
    "config.token_endpoint = 'https://auth.acme-corp.com/oauth2/token'\n",
    "aws_region = 'eu-west-1'\naws_profile = 'prod-readonly'\n",
    "Call 1-800-FLOWERS or see page 555.\n",
    "Matrix: [[1, 2, 3], [4, 5, 6]]; range(0, 100000)\n",
    "passwd_file = '/etc/passwd'\nkey_path = '~/.ssh/id_ed25519'\n",
    "hash = sha1('abc') = a9993e364706816aba3e25717850c26c9cd0d89d\n",
    "Meeting notes: discussed OKRs, hiring, and the Q3 roadmap. No action items.\n",
    "Error: connection refused (errno 111) at 2024-01-15T10:22:33Z\n",
    "The token bucket refills at 100 tokens per second with burst 250.\n",
]


# ------------------------------------------------------- prefixed tokens added in 2026-12
# Their own random stream, and their rows come after all the others: the earlier rows stay exactly
# as generated before (main --append adds only these to the existing file).
R2 = random.Random(20261204)
WORD_DASH = ALNUM + "_-"


def rand2(alphabet: str, n: int) -> str:
    return "".join(R2.choice(alphabet) for _ in range(n))


def mixed2(alphabet: str, n: int) -> str:
    while True:
        v = rand2(alphabet, n)
        if any(c.islower() for c in v) and any(c.isupper() for c in v) and any(c.isdigit() for c in v):
            return v


def google_api_key() -> str:
    return "AIza" + rand2(WORD_DASH, 35)


def google_oauth_secret() -> str:
    return "GOCSPX-" + rand2(WORD_DASH, 28)


def npm_token() -> str:
    return "npm_" + mixed2(ALNUM, 36)


def pypi_token() -> str:
    # A macaroon's bytes start with its location, b"\x02\x01\x08pypi.org", then the next field.
    raw = b"\x02\x01\x08pypi.org\x02\x24" + bytes(R2.randrange(256) for _ in range(R2.randint(120, 160)))
    return "pypi-" + b64url(raw)


def sendgrid_key() -> str:
    return "SG." + rand2(WORD_DASH, 22) + "." + rand2(WORD_DASH, 43)


def twilio_key() -> str:
    while True:
        v = rand2(string.digits + "abcdef", 32)
        if any(c.isdigit() for c in v) and any(c.isalpha() for c in v):
            return "SK" + v


def huggingface_token() -> str:
    while True:
        v = rand2(string.ascii_letters, 34)
        if sum(c.isupper() for c in v) >= 8 and sum(c.islower() for c in v) >= 8:
            return "hf_" + v


def anthropic_key() -> str:
    return "sk-ant-api03-" + mixed2(WORD_DASH, 93) + "AA"


def prefixed_doc(k: int) -> Doc:
    """The prefixed tokens of 2026-12 in the places they are usually pasted."""
    kind, shape = ["config", "code", "config", "chat", "chat"][k % 5], k % 10
    d = Doc(kind)
    if kind == "config" and shape == 0:
        d.add("# .env\nGOOGLE_API_KEY=").plant("GOOGLE_API_KEY", google_api_key()).add("\nSENDGRID_API_KEY=")
        d.plant("SENDGRID_KEY", sendgrid_key()).add("\nTWILIO_API_KEY=").plant("TWILIO_KEY", twilio_key())
        d.add("\nHF_TOKEN=").plant("HUGGINGFACE_TOKEN", huggingface_token()).add("\nANTHROPIC_API_KEY=")
        d.plant("ANTHROPIC_KEY", anthropic_key()).add("\nLOG_LEVEL=debug\n")
    elif kind == "config" and shape == 2:
        d.add("# ~/.npmrc\n//registry.npmjs.org/:_authToken=").plant("NPM_TOKEN", npm_token()).add("\n\n# ~/.pypirc\n")
        d.add("[pypi]\n  username = __token__\n  password = ").plant("PYPI_TOKEN", pypi_token()).add("\n")
    elif kind == "config" and shape == 5:
        d.add('{"installed":{"client_id":"4815162342-abcdefgh.apps.googleusercontent.com","project_id":"demo",')
        d.add('"client_secret":"').plant("GOOGLE_OAUTH_SECRET", google_oauth_secret()).add('","redirect_uris":["http://localhost"]}}\n')
    elif kind == "config":
        d.add("maps:\n  geocode: https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key=")
        d.plant("GOOGLE_API_KEY", google_api_key()).add("\nmail:\n  provider: sendgrid\n  key: ")
        d.plant("SENDGRID_KEY", sendgrid_key()).add("\n")
    elif kind == "code" and shape == 1:
        d.add("import anthropic\nclient = anthropic.Anthropic(api_key=\"").plant("ANTHROPIC_KEY", anthropic_key()).add("\")\n")
        d.add("from huggingface_hub import login\nlogin(token=\"").plant("HUGGINGFACE_TOKEN", huggingface_token()).add("\")\n")
    elif kind == "code" and shape == 6:
        d.add("flow = Flow.from_client_config({'web': {'client_id': CLIENT_ID, 'client_secret': '")
        d.plant("GOOGLE_OAUTH_SECRET", google_oauth_secret()).add("'}}, scopes=SCOPES)\n")
        d.add("client = Client('").plant("TWILIO_KEY", twilio_key()).add("', api_secret, account_sid)\n")
    else:
        d.add("hey, npm publish fails with 403, I used ").plant("NPM_TOKEN", npm_token()).add(" from the CI settings. ")
        d.add("Also the maps key ").plant("GOOGLE_API_KEY", google_api_key()).add(" works locally but not in prod?")
        d.add(" and twine wants ").plant("PYPI_TOKEN", pypi_token()).add(" I think")
    return d


PREFIXED_NEGATIVES = [
    "Google API keys start with AIza; AIzaSy is the usual head. GOCSPX- starts OAuth client secrets.\n",
    "short AIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6 and long AIzaSyA1b2C3d4E5f6G7h8I9j0K_L-m3N4o5P6qR\n",
    "npm_config_cache=/tmp/.npm npm_package_version=1.2.3 npm_lifecycle_event=build\n",
    "pip install --index-url https://pypi-mirror.internal/simple pkg; pypi-AgEIcHlwaS5vcmc alone\n",
    "Widgets: SG.Widget.Button and SG.Layout.Grid render the form; SKU 1234-5678.\n",
    "md5 SKd41d8cd98f00b204e9800998ecf8427e0 and xSK0123456789abcdef0123456789abcdef\n",
    "from huggingface_hub import hf_hub_download\nmodel = 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\n",
    "auth_provider: google-oauth2-provider\nkey_status: active-2024-rotated\nauth_scheme: oauth2-client-credentials\n",
]


# ------------------------------------------------- vendors' tokens added later in 2026-12
# Again a stream of their own, and rows after all the others.
R3 = random.Random(20261205)
LOWER_HEX = string.digits + "abcdef"


def hex3(n: int) -> str:
    while True:
        v = "".join(R3.choice(LOWER_HEX) for _ in range(n))
        if any(c.isdigit() for c in v) and any(c.isalpha() for c in v):
            return v


def shopify_token() -> str:
    return R3.choice(["shpat_", "shpca_", "shppa_", "shpss_"]) + hex3(32)


def digitalocean_token() -> str:
    return R3.choice(["dop_v1_", "doo_v1_", "dor_v1_"]) + hex3(64)


def mailgun_key() -> str:
    return "key-" + hex3(32)


def databricks_token() -> str:
    return "dapi" + hex3(32) + R3.choice(["", "", "-2", "-3"])


def postman_key() -> str:
    return "PMAK-" + hex3(24) + "-" + hex3(34)


def linear_key() -> str:
    return "lin_api_" + "".join(R3.choice(ALNUM) for _ in range(40))


def doppler_token() -> str:
    kind = R3.choice(["dp.pt.", "dp.st.", "dp.st.prd.", "dp.ct.", "dp.sa."])
    while True:
        v = "".join(R3.choice(ALNUM) for _ in range(R3.choice([43, 44])))
        if sum([any(c.islower() for c in v), any(c.isupper() for c in v), any(c.isdigit() for c in v)]) >= 2:
            return kind + v


def slack_app_token() -> str:
    app = "A0" + "".join(R3.choice(string.ascii_uppercase + string.digits) for _ in range(9))
    return f"xapp-1-{app}-{''.join(R3.choice(string.digits) for _ in range(13))}-{hex3(64)}"


def azure_storage_key() -> str:
    return base64.b64encode(bytes(R3.randrange(256) for _ in range(64))).decode()


def vendor_doc(k: int) -> Doc:
    """The vendors' tokens of the threat model's missed list, in the places they are usually pasted."""
    kind, shape = ["config", "code", "chat", "config", "chat"][k % 5], k % 10
    d = Doc(kind)
    if kind == "config" and shape == 0:
        d.add("# .env\nSHOPIFY_ACCESS_TOKEN=").plant("SHOPIFY_TOKEN", shopify_token()).add("\nDIGITALOCEAN_TOKEN=")
        d.plant("DIGITALOCEAN_TOKEN", digitalocean_token()).add("\nMAILGUN_API_KEY=").plant("MAILGUN_KEY", mailgun_key())
        d.add("\nDATABRICKS_TOKEN=").plant("DATABRICKS_TOKEN", databricks_token()).add("\nPOSTMAN_API_KEY=")
        d.plant("POSTMAN_KEY", postman_key()).add("\nLINEAR_API_KEY=").plant("LINEAR_KEY", linear_key())
        d.add("\nDOPPLER_TOKEN=").plant("DOPPLER_TOKEN", doppler_token()).add("\nLOG_LEVEL=info\n")
    elif kind == "config" and shape == 5:
        d.add('{\n  "ConnectionStrings": {\n    "Storage": "DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey=')
        d.plant("AZURE_STORAGE_KEY", azure_storage_key()).add(';EndpointSuffix=core.windows.net"\n  },\n')
        d.add('  "Slack": { "AppToken": "').plant("SLACK_TOKEN", slack_app_token()).add('" }\n}\n')
    elif kind == "config":
        d.add("[DEFAULT]\nhost = https://adb-1234567890123456.7.azuredatabricks.net\ntoken = ")
        d.plant("DATABRICKS_TOKEN", databricks_token()).add("\n\n# doctl\naccess-token: ")
        d.plant("DIGITALOCEAN_TOKEN", digitalocean_token()).add("\n")
    elif kind == "code" and shape == 1:
        d.add("session = shopify.Session(shop_url, api_version, '").plant("SHOPIFY_TOKEN", shopify_token()).add("')\n")
        d.add("requests.post(MAILGUN_URL, auth=('api', '").plant("MAILGUN_KEY", mailgun_key()).add("'), data=msg)\n")
    elif kind == "code":
        d.add('headers = {"X-API-Key": "').plant("POSTMAN_KEY", postman_key()).add('"}\n')
        d.add("client = pydo.Client(token=\"").plant("DIGITALOCEAN_TOKEN", digitalocean_token()).add("\")\n")
        d.add("linear = LinearClient(api_key='").plant("LINEAR_KEY", linear_key()).add("')\n")
        d.add("blob = BlobServiceClient.from_connection_string('AccountName=acme;AccountKey=")
        d.plant("AZURE_STORAGE_KEY", azure_storage_key()).add(";EndpointSuffix=core.windows.net')\n")
    elif shape == 7:
        d.add("socket mode needs the app token, I set ").plant("SLACK_TOKEN", slack_app_token())
        d.add(" and doppler run uses ").plant("DOPPLER_TOKEN", doppler_token()).add(", linear sync with ")
        d.plant("LINEAR_KEY", linear_key()).add(" still 401s")
    elif shape == 2:
        d.add("the storefront app fails with 401, token is ").plant("SHOPIFY_TOKEN", shopify_token())
        d.add(" and the mail key ").plant("MAILGUN_KEY", mailgun_key()).add(" - did someone rotate them?")
    else:
        d.add("can you run the collection with ").plant("POSTMAN_KEY", postman_key()).add(" and the PAT ")
        d.plant("DATABRICKS_TOKEN", databricks_token()).add(" please")
    return d


VENDOR_NEGATIVES = [
    "Shopify tokens start shpat_, shpca_, shppa_ or shpss_; DigitalOcean's dop_v1_, doo_v1_ or dor_v1_.\n",
    "cache miss for monkey-5d41402abc4b2a76b9719d911017c592 and api_key-5d41402abc4b2a76b9719d911017c592\n",
    "wrote key-5d41402abc4b2a76b9719d911017c592.json and key-5d41402abc4b2a76b9719d911017c592-v2\n",
    "dapi_version = 2  # rapidapi7d793037a0760186574b0282f2f435e7 is a digest\n",
    "PMAK- keys have two hex parts; see the Postman docs. key-value-store, dop_v2_ is not a prefix.\n",
    "lin_api_key = load('linear'); lin_api_version_2024_01_15_preview; dp.pt. and dp.st. tokens; xapp-config-v2\n",
    "AccountName=acmeprod;AccountKey=${AZURE_STORAGE_KEY};EndpointSuffix=core.windows.net\n",
]


def vendor_rows(first_id: int) -> list[dict]:
    rows = [vendor_doc(k).row() for k in range(20)]
    rows += [{"kind": "negative", "text": t, "expected": []} for t in VENDOR_NEGATIVES]
    for i, row in enumerate(rows):
        row["id"] = first_id + i
    return rows


def main() -> None:
    if "--append" in sys.argv:
        rows = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines()]
        rows += vendor_rows(len(rows))
        write(rows)
        return
    makers = [code_python, code_js, config_env, config_yaml, config_json, pem_doc, chat, email_doc]
    weights = [30, 15, 12, 12, 12, 6, 45, 20]
    rows = []
    for maker, count in zip(makers, weights):
        rows += [maker().row() for _ in range(count)]
    rows += [hard_positive(k).row() for k in range(4)]
    rows += [{"kind": "negative", "text": t, "expected": []} for t in NEGATIVES]
    for i, row in enumerate(rows):
        row["id"] = i
    rows += extra_rows(len(rows))
    rows += vendor_rows(len(rows))
    write(rows)


def extra_rows(first_id: int) -> list[dict]:
    rows = [prefixed_doc(k).row() for k in range(20)]
    rows += [{"kind": "negative", "text": t, "expected": []} for t in PREFIXED_NEGATIVES]
    for i, row in enumerate(rows):
        row["id"] = first_id + i
    return rows


def write(rows: list[dict]) -> None:
    for row in rows:
        for e in row["expected"]:
            assert row["text"][e["start"] : e["end"]] == e["value"]
    with OUT.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps({"id": row["id"], "kind": row["kind"], "text": row["text"], "expected": row["expected"]}) + "\n")
    print(f"wrote {len(rows)} items to {OUT}")


if __name__ == "__main__":
    main()
