"""Write the seed corpora in fuzz/corpus/<target>/ (deterministic; rerun after changing a format).

Each file is a harness input: the header bytes the harness reads first (see the comment at the top
of fuzz/fuzz_<target>.c), then the payload, named by its SHA-1. Run: ``python fuzz/make_corpus.py``.

Append-only: a seed's bytes must not depend on how many seeds come before it, so adding texts
(here or as new rows of tests/data/planted_secrets.jsonl, which only grows) adds files and
renames none, and rerunning writes the same files. Files in a corpus that this script does not
write are kept (and listed); after changing a harness's header format, rerun with ``--prune`` to
drop the seeds that no longer match. tests/test_fuzz_regressions.py checks that every file this
script writes is committed.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent

SCAN_TEXTS = [
    b"how do I reset my password",
    b"reset %2e%2e%2f%2e%2e%2f password",
    b"\\x41\\x42\\x43 and \\u0041\\U0001F600",
    b"&lt;script&gt;alert(1)&lt;/script&gt; &#x41;&#65; &amp",
    b"aGVsbG8gd29ybGQgdGhpcyBpcyBhIGJhc2U2NCBibG9iIQ== deadbeef0123456789abcdef0123456789",
    b"MTIzLTQ1LTY3ODk= 123%2D45%2D6789 0x3132332d34352d36373839 343131313131313131313131",
    "family \U0001F468\u200D\U0001F469\u200D\U0001F467 flag \U0001F3F4\U000E0067\U000E0062"
    "\U000E0065\U000E006E\U000E0067\U000E007F thumbs \U0001F44D\U0001F3FD".encode(),
    "bidi \u202Eevil\u202C zero\u200Bwidth soft\u00ADhyphen \uFEFFbom".encode(),
    b"ctrl \x00\x01\x7f tab\tcr\r nel \xc2\x85 end",
    b"invalid \xff\xfe \xc0\xaf \xe0\x80\x80 \xf5\x80 trunc \xe2\x82",
    b"lone surrogate \xed\xa0\x80 and \xed\xbf\xbf",
    b"word " * 40,
    b"a b c a b c a b c a b c d",
    b"variation \xef\xb8\x8f\xef\xb8\x8f selector \xf3\xa0\x84\x80",
    b"   leading and trailing   \n",
    b"",
    "\u00e9t\u00e9 na\u00efve \u4e2d\u6587 \u0627\u0644\u0639\u0631\u0628\u064a\u0629".encode(),
]

DETECT_TEXTS = [
    b"ssn 123-45-6789 card 4111 1111 1111 1111",
    b"my ssn is 123456789 and phone +1 555-123-4567",
    b"iban GB82 WEST 1234 5698 7654 32 or DE89370400440532013000",
    b"mail alice@example.com, url https://bob@host.example/x",
    b"postgres://app:s3cr3tP4ss@db.internal:5432/app",
    b"-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    b"-----END RSA PRIVATE KEY-----",
    b"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    b'api_key = "Zx9Qw2Lm8Rt4Yp6Vb3Nc"  password: hunter2hunter2XY',
    "caf\u00e9 4111-1111-1111-1111 \U0001F600 ssn 078-05-1120".encode(),
    b"nul\x00in 123-45-6789\x00 text \xed\xa0\x80 surrogate",
    b"@a.io%" * 40 + b"123-45-6789" + b"@bb.com%1" * 40,  # one cluster past the pairwise check
]


# Appended after the planted rows. Their header bytes continue the count where it stood when they
# were committed (11 texts + 20 planted rows), not where it stands now: the planted rows grew.
DETECT_TEXTS_2_FIRST_HEADER = 31
DETECT_TEXTS_2 = [
    b"sshpass -v -p Hq8#kLm2pQr9 ssh -p 2222 deploy@host; sshpass -pHq8#kLm2pQr9 x",
    b"redis-cli -h cache -p 6379 -a 'Hq8#kLm2pQr9' ping | grep -a x",
    b"FROM alpine\n  ENV\tDB_PASSWORD \"Hq8#kLm2pQr9\"  \r\nenv API_TOKEN Zk29fjA01kd8Gh3LmQ9x",
    b"<password> correct horse battery staple </password><api_key>Zk29fjA01kd8Gh3LmQ9x (new)</api_key>",
]


def _stream(tag: str, n: int, alphabet: str) -> str:
    """``n`` characters of ``alphabet`` derived from SHA-256 of ``tag``: fixed, token-like bodies."""
    out, k = [], 0
    while len(out) < n:
        for b in hashlib.sha256(f"{tag}/{k}".encode()).digest():
            if b < 256 - 256 % len(alphabet):
                out.append(alphabet[b % len(alphabet)])
        k += 1
    return "".join(out[:n])


def _hx(tag: str, n: int) -> str:
    return _stream(tag, n, "0123456789abcdef")


def _an(tag: str, n: int) -> str:
    return _stream(tag, n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def _wd(tag: str, n: int) -> str:
    return _stream(tag, n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def detect_texts_3() -> list[bytes]:
    """Vendor token forms, the credential-attribute rule and Azure connection strings: each rule's
    token in a few contexts, then near misses one step past its boundaries (length, alphabet,
    prefix, the character before or after). Header bytes count from 0 in this list, so texts
    appended here leave the files above alone."""
    ak = _an("azure", 85) + "w=="
    ak2 = _an("azure2", 85) + "Q=="
    mac = "AgEIcHlwaS5vcmc"
    texts = [
        # Google API key (AIza + 35 of [A-Za-z0-9_-]) and OAuth client secret (GOCSPX- + 28).
        f"GOOGLE_API_KEY=AIza{_wd('g1', 35)}\n?key=AIza{_wd('g2', 35)}&x=1 _AIza{_an('g3', 35)}",
        f"AIza{_wd('g4', 34)} AIza{_wd('g5', 36)} -AIza{_wd('g6', 35)} xAIza{_wd('g7', 35)} AIza",
        f'"client_secret":"GOCSPX-{_wd("o1", 28)}" GOCSPX-{_wd("o2", 27)} GOCSPX-{_wd("o3", 29)}',
        # npm (npm_ + 36 letters and digits of all three classes) and PyPI (pypi- + macaroon).
        f"//registry.npmjs.org/:_authToken=npm_{_an('n1', 36)}\n_npm_{_an('n2', 36)}_ done",
        f"npm_{_hx('n3', 36)} npm_{_an('n4', 35)} npm_{_an('n5', 37)} anpm_{_an('n6', 36)}",
        f"password = pypi-{mac}{_wd('p1', 60)}\npypi-AgENdGVzdC5weXBpLm9yZw{_wd('p2', 80)}",
        f"pypi-{mac}{_wd('p3', 49)} pypi-AgEIcHlwaS5vcmd{_wd('p4', 80)} pypi-upload -pypi-{mac}x",
        # SendGrid: SG. + 22 + . + 43; not after ".", not before ".<word>".
        f"key: SG.{_wd('s1', 22)}.{_wd('s2', 43)}\nSG.{_wd('s3', 22)}.{_wd('s4', 43)}. end",
        f"x.SG.{_wd('s5', 22)}.{_wd('s6', 43)} SG.{_wd('s7', 21)}.{_wd('s8', 43)} "
        f"SG.{_wd('s9', 22)}.{_wd('sa', 43)}.com SG.{_wd('sb', 22)}.{_wd('sc', 44)}",
        # Twilio API key SID: SK + 32 hex with a letter and a digit.
        f"Client('SK{_hx('t1', 32)}', s) SK{_hx('t2', 32).upper()} SK{'0' * 32} SK{_hx('t3', 31)}",
        f"SK{_hx('t4', 33)} xSK{_hx('t5', 32)} SK{_hx('t6', 30)}zz SKU-{_hx('t7', 32)}",
        # Hugging Face: hf_ + 34 letters, 8+ upper and 8+ lower case; camelCase names are not.
        f"login(token=\"hf_{_stream('h1', 34, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')}\")",
        "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 hf_abcdefghijklmnopqrstuvwxyzabcdefgh "
        f"hf_{_an('h2', 34)} hf_ABCDEFGHIJKLmnopqrstuvwxyzabcdefg",
        # Anthropic (sk-ant-) beside OpenAI-style sk- keys.
        f"ANTHROPIC_API_KEY=sk-ant-api03-{_wd('a1', 93)}AA\nsk-ant-{_hx('a2', 20)} sk-{_an('a3', 48)}",
        # Shopify (shpat_/shpca_/shppa_/shpss_ + 32 lower hex), DigitalOcean (do?_v1_ + 64 hex).
        f"shpat_{_hx('y1', 32)} 'shpca_{_hx('y2', 32)}' shppa_{_hx('y3', 32)},shpss_{_hx('y4', 32)}",
        f"shpxx_{_hx('y5', 32)} shpat_{_hx('y6', 32).upper()} shpat_{_hx('y7', 33)} shpat_{'a' * 32}",
        f"token=\"dop_v1_{_hx('d1', 64)}\" doo_v1_{_hx('d2', 64)}\ndor_v1_{_hx('d3', 64)}",
        f"dop_v2_{_hx('d4', 64)} dop_v1_{_hx('d5', 63)} dop_v1_{_hx('d6', 65)} xdop_v1_{_hx('d7', 64)}",
        # Mailgun: key- + 32 hex, not inside a name (api_key-, -key-, .key-, key-<hex>-v2, .json).
        f"auth=('api', 'key-{_hx('m1', 32)}') key-{_hx('m2', 32)}. end (key-{_hx('m3', 32)})",
        f"api_key-{_hx('m4', 32)} my-key-{_hx('m5', 32)} a.key-{_hx('m6', 32)} "
        f"key-{_hx('m7', 32)}-v2 key-{_hx('m8', 32)}.json key-{_hx('m9', 31)}",
        # Databricks: dapi + 32 hex, optionally -<1-2 digits>.
        f"token = dapi{_hx('b1', 32)}-2\nDATABRICKS_TOKEN=dapi{_hx('b2', 32)}",
        f"dapi{_hx('b3', 32)}-12 dapi{_hx('b4', 32)}-123 dapi{_hx('b5', 32)}-x "
        f"rapidapi{_hx('b6', 32)} dapi_version dapi{_hx('b7', 32)}-",
        # Postman: PMAK- + 24 hex + - + 34 hex.
        f'{{"X-API-Key": "PMAK-{_hx("k1", 24)}-{_hx("k2", 34)}"}} PMAK-{_hx("k3", 24)}-{_hx("k4", 34)}-x',
        f"PMAK-{_hx('k5', 23)}-{_hx('k6', 34)} PMAK-{_hx('k7', 24)}-{_hx('k8', 33)} PMAK- keys",
        # Linear: lin_api_ + 40 letters and digits of two classes or more.
        f"LinearClient(api_key='lin_api_{_an('l1', 40)}') lin_api_{_an('l2', 39)} lin_api_{_an('l3', 41)}",
        f"lin_api_{'abcdefghij' * 4} lin_api_key = load() lin_api_version_2024_01_15_preview",
        # Doppler: dp.<kind>. + 40-44 letters and digits; dp.st.<config>.<token>.
        f"DOPPLER_TOKEN=dp.st.prd.{_an('q1', 44)}\ndp.pt.{_an('q2', 43)} dp.sa.{_an('q3', 40)}",
        f"dp.ct.{_an('q4', 41)} dp.said.{_an('q5', 42)} dp.scim.{_an('q6', 40)} dp.audit.{_an('q7', 40)}",
        f"dp.pt.{_an('q8', 39)} dp.pt.{_an('q9', 45)} x.dp.pt.{_an('qa', 42)} dp.xx.{_an('qb', 42)} "
        f"dp.pt.{_an('qc', 42)}.ext dp.st.{'c' * 36}.{_an('qd', 42)} dp.pt. and dp.st. tokens",
        # Slack app-level token: xapp-<digit>-<app id>-<digits>-<64 hex>.
        f'"AppToken": "xapp-1-A0{_an("x1", 9).upper()}-{"7" * 13}-{_hx("x2", 64)}"',
        f"xapp-1-A0{_an('x3', 9).upper()}-{'7' * 13}-{_hx('x4', 64)}- xapp-config-v2 "
        f"xapp-1-A0-123-{_hx('x5', 64)} xapp-12-A0ABCDEF-1234567-{_hx('x6', 64)}",
        # Azure storage connection strings: only the AccountKey value (86 base64 + "AQgw" + "==").
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={ak};EndpointSuffix=core.windows.net",
        f'{{"Storage": "AccountName=a;AccountKey={ak2}"}}\nAZURE_STORAGE_CONNECTION_STRING='
        f"'BlobEndpoint=https://a.blob.core.windows.net/;AccountKey={ak}'",
        f"AccountKey=${{AZURE_STORAGE_KEY}}; AccountKey={_an('z1', 85)}B== AccountKey={ak[:-2]} "
        f"AccountKey={ak}= AccountKey={ak}x SecondaryAccountKey={ak2} AccountKey={'a' * 85}w==",
        f"AccountKey=\"{ak}\" accountkey={ak2};AccountKey= ;AccountKey={_an('z2', 84)}w==",
        # Credential attributes: under auth_provider & co. a value that reads as a name is none;
        # a random value still is. "aa1Bb2Cc" style values cross the 4-changes boundary.
        "auth_provider: google-oauth2-provider\nkey_status: active-2024-rotated\n"
        "auth_scheme: oauth2-client-credentials\ntoken_issuer = https://issuer.example.org/",
        '{"auth_provider": "google-oauth2-provider", "secret_region": "eu-west-1-primary-zone", '
        '"api_key_provider": "Zx9Qw2Lm8Rt4Yp6Vb3NcQ7"}',
        "<auth_provider>google-oauth2-provider</auth_provider><token_vault>hashicorp-vault-prod"
        "</token_vault> secret_tier=enterpriseTier2Plus2Gold",
        "api_key_status: deprecatedKeyV2Rotated9x\nkey_status: rotatedKeyV2Rotated9\nauth_provider = aB1cD2eF3gH4iJ5kL6\n"
        "token_owner: platform-team/identity-svc\nsecret_source: vault:kv/data/app/prod",
        "AUTH_PROVIDER=google-oauth2-provider\nauth_provider_token=google-oauth2-provider-xK9q2\n"
        "password_policy: strong-enough-2024 key_statuses=[active, revoked]",
        # Several forms next to each other, in non-ASCII text and after a NUL.
        f"caf\u00e9 npm_{_an('c1', 36)}\u00e9 \U0001F511hf_{_stream('c2', 34, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')}"
        f"\x00shpat_{_hx('c3', 32)}\u2028key-{_hx('c4', 32)}\r\nAIza{_wd('c5', 35)}",
        f"AIza{_wd('c6', 35)}GOCSPX-{_wd('c7', 28)} SK{_hx('c8', 32)}SK{_hx('c9', 32)} "
        f"dapi{_hx('ca', 32)}dapi{_hx('cb', 32)} example AIza{_wd('cc', 31)}EXAMPLE",
        # SSNs and cards whose groups mix spaces and hyphens, in lists, beside phones, and their
        # near misses (Luhn, IIN, SSA rules, a third separator, a glued digit or letter).
        "ssn 123-45 6789 234 56-7890 card 4111 1111-1111 1111 4111-1111 1111-1111 12/29 "
        "3782 822463-10005 5555-5555 5555-4444, 4000-1005 1111 123 45-6789",
        "call 555-123 4567 +1 555-123 4567 1-800 555-0199 2024-01 15 sizes 123-45 6789 1024 "
        "4111-1111 1111-1112 9111 1111-1111 1110 000-12 3456 123-45.6789 123-45 6789-1 a123-45 6789x",
        # Detector forms 5: 011 and a spaced 00 before a country code, one dot mixed in after a
        # country code, ' -- ' between an SSN's groups, a '+' glued to a phone word; then the
        # forms left unread (compact 00, 011 glued to the code, a bare dotted number, pages and a
        # year, a dotted signed number, two dots read as decimals, hex-dump pairs after 00).
        "call 011 44 20 7946 0958 or 00 44 20 7946 0958, +1 415.555-0123 +44 20.7946 0958 "
        "ssn 123 -- 45 -- 6789 <!-- 123 -- 45 -- 6789 --> tel+44 20 7946 0958 Phone+1 415 555 0123 fax+1 2125550100",
        "00442079460958 01144 2079 460958 415.555-0123 252.227-7013 pp. 555-123 1999 +7.495.123.456 "
        "+1 12.50-13.75 00 01 02 03 04 05 06 011 1 0101 0110 x+1 234-56-7890 123 - 45 -- 6789 tel+ 44",
        # A database URL's query or fragment before any '/': after the credentials' '@' and a host
        # an address is found and the password ends before it; a '?' or '#' with no '@' before it,
        # or a password's other characters between, stays the password's.
        "postgres://u:Kq2mZ8vT@db.example?contact=alice@example.com&cc=b@corp.io mysql://u:p@h#x@y.com",
        "postgres://user:pa?ss@host.example.com/db postgres://user:p@ss#word9@localhost?x=alice@example.com",
        "redis://:s3cr3tPw@[::1]:6379,h2:6380#to=ops@corp.io postgres://u:p@ss!w?rd@db.example.com "
        "mongodb://u:p?w#d@corp.io postgres://db.example?contact=alice@example.com",
        # With no credentials: a host list with ports, then '?' or '#', then an address as a
        # parameter's value; a password that is no port, or an address that is no value, stays the
        # password's. Files named for a version in a URL's path are no address; in a query they are.
        "postgres://db.internal:5432?a=1&to=alice@example.com mongodb://h1:27017,h2:27017#cc=b@corp.io "
        "redis://:5432?x=a@corp.io postgres://admin:Secret?x=abc@db.corp.io postgres://u:1234?abc@db.corp.io",
        "https://example.com/dl/release@v2.zip https://r.example/npm/lodash@4.17.21.tgz "
        "https://cdn.example.com/jquery@3.7.1.min.js?v=a@b.zip https://s3.example.com/e/alice@example.com.csv "
        "file:///home/release@v2.tar.gz mailto:a@b.zip",
        # A file named for a version is no address anywhere; a zip or map domain in a path is one,
        # and a bare number then a name (163.com) keeps its address.
        "js/app@v2.bundle.js lodash@4.17.21.tgz cdn.example.com/pkg@v2.zip pkg@2.min.js foo@1.0.0-rc.1.ZIP "
        "https://x.example/u/alice@corp.zip https://x.example/e/alice@corp.zip.csv alice@163.com.csv "
        "alice@corp.com@v2.zip alice@v.zip alice@2fa.map app@abc.js.map",
        # A dist-tag and extensions only is a version; a name ending in an extension that is no TLD
        # and leaving no domain is a file anywhere; a tag and a name, or a TLD, keep the address.
        "pkg@latest.zip core@dev.ZIP repo@main.zip app@nightly.js.map agent@nightly.exe ?f=notes@draft.txt "
        "alice@dev.corp.zip alice@corp.com.exe alice@corp.zip.csv support@nightly.app alice@latest.zipper "
        "postgres://u:Kq2mZ8vT@db.corp.io?to=agent@nightly.exe",
    ]
    return [t.encode("utf-8") for t in texts]


def write(target: str, items: list[bytes], prune: bool = False) -> None:
    out = ROOT / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    wanted = {hashlib.sha1(data).hexdigest(): data for data in items}
    others = sorted(f.name for f in out.iterdir() if f.name not in wanted)
    # Files this script does not write (a minimised crash added by hand, a seed whose text or
    # header changed) stay unless asked: the fuzzer and tests/test_fuzz_regressions.py read them.
    if others and prune:
        for name in others:
            (out / name).unlink()
    elif others:
        print(f"{target}: kept {len(others)} file(s) this script does not write "
              f"({', '.join(n[:12] for n in others[:4])}{', ...' if len(others) > 4 else ''}); "
              f"--prune removes them")
    for name, data in wanted.items():
        (out / name).write_bytes(data)


def scan_corpus() -> list[bytes]:
    # Header: flags (bit0 str mode, bit1 escapes, bit2 no token cap, bit3 cap=byte1, bit4 no
    # model cap, bits5-7 misalignment), token cap, blob length - 8 (0: off), percent run - 1.
    headers = [bytes([0x02, 50, 24, 1]), bytes([0x03, 50, 24, 1]), bytes([0x2B, 3, 1, 2]),
               bytes([0x14 | 0xE0, 0, 0, 0])]
    return [headers[k % len(headers)] + text for k, text in enumerate(SCAN_TEXTS)] + [
        headers[1] + text for text in SCAN_TEXTS[:8]]


def detect_corpus() -> list[bytes]:
    rows = [json.loads(line) for line in (REPO / "tests/data/planted_secrets.jsonl").open()]
    texts = DETECT_TEXTS + [r["text"].encode("utf-8", "surrogatepass") for r in rows[::10]]
    items = [bytes([k % 16]) + t for k, t in enumerate(texts)]
    items += [bytes([(DETECT_TEXTS_2_FIRST_HEADER + k) % 16]) + t for k, t in enumerate(DETECT_TEXTS_2)]
    return items + [bytes([k % 16]) + t for k, t in enumerate(detect_texts_3())]


def noise_corpus() -> list[bytes]:
    items = []
    specials = [0.0, -0.0, 1.0, -1.5, 5e-324, 2.2250738585072014e-308, 1e300, -1e308,
                float("inf"), float("nan"), 3.4e38, 1e-45]
    for k in range(24):
        flags = k % 16 | (0x40 if k % 5 == 0 else 0) | (0x10 if k in (7, 19) else 0)
        rows, dim = 1 + k % 3, [1, 2, 3, 8, 17, 64][k % 6]
        scale = [1.0, 0.25, 1e-3, 1e200, 3.0][k % 5]
        step_exp = [-8, -4, -2, 0, -20, 10][k % 6]
        clip = [1.0, 0.5, 1e308, 0.0][k % 4]
        header = struct.pack("<BBBdbd", flags, rows - 1, dim - 1, scale, step_exp, clip)
        header += bytes((k * 7 + i) % 256 for i in range(20))
        count = rows * dim
        values = [specials[(k + i) % 12] if k % 4 == 3 else 0.1 * i for i in range(count)]
        if flags & 1:
            # float32 has no 1e300: store it as the bits of +-Inf, which is what a cast gives.
            values = [v if abs(v) < 3.5e38 or v != v else math.copysign(math.inf, v) for v in values]
        vals = struct.pack(f"<{count}{'f' if flags & 1 else 'd'}", *values)
        items.append(header + vals)
    return items


def chacha20_corpus() -> list[bytes]:
    items = []
    rfc_key = bytes(range(32))
    for k, nonce in enumerate([bytes.fromhex("000000090000004a00000000"),
                               bytes.fromhex("000000000000004a00000000"), bytes(12),
                               b"\xff" * 12]):
        for counter, nb in [(1, 0x09), (0, 0x41), (0xFFFFFFF0, 0x42), (7, 0xF5), (0, 0x00)]:
            key = rfc_key if k % 2 == 0 else hashlib.sha256(bytes([k, nb])).digest()
            items.append(key + nonce + struct.pack("<I", counter) + bytes([nb]) +
                         bytes((counter + i) % 256 for i in range(k * 3)))
    return items


def aes_corpus() -> list[bytes]:
    # SP 800-38A F.5.5 key and counter block, then hashed keys; flags: counter carry (1: low 64
    # bits, 2: all 128), output misalignment, 0x40 checks the production stream (0x80: 2 refills).
    items = []
    sp_key = bytes.fromhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
    sp_ctr = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
    for k, (nb, flags) in enumerate([(1, 0x00), (7, 0x01), (200, 0x02), (14, 0x45), (255, 0xC6),
                                     (0, 0x40), (33, 0x3D), (128, 0x81), (9, 0x42), (64, 0x03)]):
        key = sp_key if k % 3 == 0 else hashlib.sha256(bytes([k, nb, flags])).digest()
        ctr = sp_ctr if k % 2 == 0 else hashlib.sha256(key).digest()[:16]
        items.append(key + ctr + bytes([nb, flags]) + bytes((nb * i + k) % 256 for i in range(k)))
    return items


def corpora() -> dict[str, list[bytes]]:
    return {"scan": scan_corpus(), "detect": detect_corpus(), "noise": noise_corpus(),
            "chacha20": chacha20_corpus(), "aes": aes_corpus()}


if __name__ == "__main__":
    prune = "--prune" in sys.argv[1:]
    for target, items in corpora().items():
        write(target, items, prune)
    for target in ("scan", "detect", "noise", "chacha20", "aes"):
        files = list((ROOT / "corpus" / target).iterdir())
        print(f"{target}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")
