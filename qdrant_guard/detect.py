"""Secret and PII detection, and redaction.

The kernel (native ``qdrant_guard._detect``, or the reference ``qdrant_guard._detect_py`` when
``QDRANT_GUARD_IMPLEMENTATION=python``) finds spans; this module wraps them and redacts.

What is detected (each finding names the check that confirmed it in ``Finding.validator``):

* ``SSN``: ``AAA-GG-SSSS``, ``AAA GG SSSS`` or ``AAA.GG.SSSS``, the first two separators mixed
  (``AAA-GG SSSS``, ``AAA GG-SSSS``), or dashes between the groups, single or doubled, with a
  space on each side or not, in any mix, single spaces among them (``AAA - GG - SSSS``,
  ``AAA--GG--SSSS``, ``AAA -- GG -- SSSS``, ``AAA - GG-SSSS``, ``AAA - GG SSSS``; an en or em
  dash folds to ``-``), or
  the area in parentheses (``(AAA)-GG-SSSS``, ``(AAA) GG-SSSS``, ``(AAA)GG-SSSS``, behind a
  ``+`` too); a bare 9-digit number only when "ssn" or
  "social security" (or ``social_security``, ``social-security``, ``socialSecurity``) occurs in
  the 40 characters before it. SSA rules ("ssa-rules"): area not 000,
  666 or 900-999, group not 00, serial not 0000; the advertising numbers 078-05-1120 and
  219-09-9999 are skipped.
* ``CREDIT_CARD``: 13-19 digits, ungrouped or in groups of 4 (last group 1-4) or 4-6-5 / 4-6-4,
  split by spaces or dashes, one kind or both mixed (``4111-1111 1111-1111``), by dots alone
  (``4111.1111.1111.1111``), or by dashes as an SSN's (``4111--1111--1111--1111``, ``4111 -- 1111 -- 1111 -- 1111``,
  ``4111 - 1111-1111 - 1111``), a known IIN
  prefix, Luhn-valid ("luhn"). Published test
  numbers such as 4111 1111 1111 1111 ARE flagged: they are card-shaped data that look real to a
  model and to a human reader.
* ``IBAN``: compact or in groups of 4 split by spaces or dashes (mixed or not) or by dots alone
  (``GB82.WEST.1234.5698.7654.32``, not running on into a dotted name), length from the country table,
  ISO 13616 mod-97 == 1 ("mod97"). Letters may be lower case; then a digit must follow the check
  digits, and a compact one needs "iban" in the 40 characters before it.
* ``EMAIL``: ``local@domain.tld`` with a letters-only TLD of 2+ characters ("format"); a
  ``user@host`` inside a URL authority is not an e-mail address (RFC 3986: the authority ends at
  the first ``/``, ``?`` or ``#``; for a database scheme, the ones whose passwords are read, whose
  passwords hold ``?`` and ``#`` unescaped, at ``/``, or at a ``?`` or ``#`` right after the
  credentials' ``@`` and a host list: ``postgres://u:pw@db.internal:5432?to=a@corp.io`` holds an
  address, ``postgres://u:pa?ss@db.corp.io`` none; with no ``@`` before it, at a ``?`` or ``#``
  after hosts with no ``:``, when the address is a parameter's value:
  ``postgres://db.internal?to=a@corp.io`` holds one; after a ``:`` the text up to the ``@`` is
  read as a password, as libpq and SQLAlchemy read it, a port or not:
  ``postgres://db.internal:5432?to=a@corp.io`` holds the password ``5432?to=a``,
  ``postgres://admin:1234?x=a@db.io`` the password ``1234?x=a``), nor is an image named for a
  display density (``logo@2x.png``, ``icon@1.5x.png``: digits, optionally a ``.`` and digits, and
  an ``x``, then an image extension, which no TLD is), nor, anywhere, a file named for a package
  and its version: a domain whose last label is a file extension (zip, tgz, gz, tar, xz, rar, jar,
  war, whl, egg, gem, deb, rpm, apk, dmg, exe, msi, iso, js, mjs, cjs, css, map, min, json, wasm,
  html, htm, xml, txt, csv, pdf) and whose first label is a version: ``v`` and digits, digits and
  a label of digits, or digits or a dist-tag (latest, next, beta, alpha, canary, nightly, rc,
  stable, dev, edge, experimental, insiders, preview, snapshot, lts, main, master) and only
  extensions after them (``release@v2.zip``, ``app@v2.bundle.js``, ``lodash@4.17.21.tgz``,
  ``jquery@3.7.1.min.js``, ``pkg@2.tar.gz``, ``pkg@latest.zip``, ``app@nightly.js.map``; digits
  or a dist-tag then a name stay an address: ``alice@163.com.csv``, ``alice@dev.corp.zip``), nor,
  anywhere, a file whose last labels are extensions that are no TLD (all of them but zip and map)
  and that leave no domain before them (``agent@nightly.exe``, ``?file=notes@draft.txt``,
  ``archive/main@abc.tgz``: no such name can be delivered to; still addresses:
  ``u/alice@corp.zip``, ``exports/alice@example.com.csv``, ``alice@corp.com.exe``,
  ``exports/alice@corp.zip.csv``, ``?email=a@b.zip``, ``mailto:a@b.zip``, bare ``a@b.zip``,
  ``main@abc.zip``). What the version rule misses is an address at a zip or map domain whose
  first label is a version or a dist-tag (``alice@v2.zip``, ``alice@163.zip``,
  ``alice@latest.zip``) and a file named for an address at a domain whose first label is ``v``
  and digits or two numbers (``alice@v2.corp.com.csv``). Addresses at example.com ARE flagged (an
  address is personal data whatever its domain).
* ``PHONE``: E.164 ``+`` and 8-15 digits, first not 0, optionally grouped by spaces and dashes,
  mixed or not (``+1 234-56-7890``; the ``+``, or the ``(`` of ``(+44)``, with no letter or digit
  right before it but the end of a phone word, ``tel``, ``phone``, ``ph``, ``mobile``, ``mob``,
  ``cell`` or ``fax`` in any case: ``tel+44 20 7946 0958``), or after a parenthesised country
  code (``(+44) 20 7946 0958``: 1-3 digits, the first not 0, counted among the 8-15), or with an
  area code or the
  trunk prefix in parentheses after the country code (``+1 (234) 567-8901``, ``+44 (0)20 7946
  0958``: 1-4 digits, a lone ``0`` not counted), or dotted after ``+CC `` or ``(+CC)``
  (``+1 234.567.8901``, ``+33 6.12.34.56.78``: the groups after the first 2+ digits long, not
  four groups of 1-3 digits, an IPv4 address), or with one dot among spaces and hyphens after
  them (``+1 415.555-0123``, ``+44 20.7946 0958``: the groups after the first 2+ digits long, not
  all of 3, 8-15 digits with the code's; two dots make it decimals, ``+1 12.50-13.75``), or dotted after the parentheses (``+1 (234)
  567.8901``), or with the country code in parentheses before them (``(+44) (0)20 7946 0958``),
  or with ``00`` for the ``+`` (``0049 30 1234567``, ``0044 (0)20 7946 0958``: the group ``00``
  and a country code ITU-T has assigned, 10-15 digits, 11 after the code 1, not after a digit and
  a space), or with ``00`` or the North American ``011`` apart from the code (``00 44 20 7946
  0958``, ``011 44 20 7946 0958``: the same rules, the rest not all in groups of two digits, hex
  bytes, and after the code 1 starting 2-9; compact, ``00442079460958``, or glued to ``011``,
  ``01144``, it is not read: a zero-padded identifier, a ZIP code), or with dots glued to the ``+`` (``+44.20.7946.0958``, ``+1.415.555.1234``: an
  assigned country code, 2+ more groups, those after the first of them 2+ digits long and not
  all of 3, not an IPv4 address, 10-15 digits, 11 after the code 1), or a trunk ``1-`` then a
  3-2-4 (``1-234-56-7890``, area 2-9) ("e164"); NANP ``555-123-4567``,
  ``555.123.4567``, ``1-555-123-4567``, ``(555) 123-4567``, ``(555)-123-4567``, ``(555)
  123.4567``, with a trunk 1 before the parentheses (``1 (555) 123-4567``, ``1(555)123-4567``),
  and with spaces and hyphens mixed (``1-800 555-0199``, ``800 555-0199``, ``555-123 4567``;
  a space before the last group only where that group is no year 1800-2099: ``259-264 1970``
  is pages and a year), with an area code starting 2-9 ("nanp"). Dates, versions, IPs and bare long integers do not match. A number right
  after a country code (``+1 ``, ``(+1)``; not glued to a letter or digit but a phone word's) is a
  phone number's rest, never an SSN: ``+1 234-56-7890`` is one phone number, and so is an SSN's
  3-2-4 with ``.`` or dashes after a country code (``+1 234.56.7890``, found whole, "e164"). A
  count or an offset before an ISO date (``+1 2023-10-15``: a year 19xx or 20xx, a month 01-12,
  a day 01-31, joined by hyphens) is no phone number.
* Separators are single characters, but for `` - `` and ``--`` in SSNs and cards. Mixed
  separators (spaces and hyphens) are read only where one consistent separator finds nothing, and
  only into an SSN, a card, a NANP or E.164 phone number or an IBAN; a date keeps its one
  separator. ``.`` is read only alone (``123.45.6789``, ``555.123.4567``), or once among spaces
  and hyphens after a country code (above), never mixed otherwise (``123-45.6789``,
  ``415.555-0123``, which is how license texts cite DFARS clauses, ``252.227-7013``); `` - ``,
  ``--`` and `` -- `` only with other dashes or single spaces and not
  where such a dash and a digit come before or after the number (``2019 - 123 - 45 - 6789``, a
  sum, ``12--123--45--6789``); other doubled separators (two spaces, ``---``) are not read. A
  dotted SSN needs exactly 3-2-4 digits and no ``.`` and a digit on
  either side, so dates (``2023.10.15``, ``15.10.2023``), versions (``1.2.3``, ``120.0.6099.109``)
  and IP addresses do not match. Where a number with mixed separators runs on (after a space)
  into more numbers, the list rules below apply to it. The cost: a row of random 4-digit numbers
  split by a random mix of spaces and dashes has a card window in about 5.6 % of 8-number rows
  (1.4 % before); rows of years, none; no new finding in 80 MB of Python sources and
  /usr/share/doc text for the mixed SSN and card forms, nor in 1 GB of Python sources,
  site-packages and /usr/share/doc, line by line, for the phone, IBAN, dotted and spaced forms
  (whose first reading of mixed NANP numbers took a citation's pages and year, ``259-264 1970``:
  a NANP number with mixed separators and a space before its last group needs that group not to
  be a year), nor in the same 1 GB for the parenthesised, dotted and dashed forms of h-det3
  (whose one changed finding is a phone number found whole, ``+1 (800) 123-4567``), nor in 648 MB
  of them (every line with a digit) for h-det4's forms (``00`` and dotted ``+`` numbers, dots in
  cards and IBANs, spaces among dashes; its first reading of ``00`` numbers took a table's digit
  groups, ``1.999 007 501 2699``, hence the rule against a digit and a space before).
* A number (SSN, card, IBAN, phone) ends at a letter or digit, not at ``_``: Markdown emphasis
  (``_123-45-6789_``) and snake_case glue (``ssn_123456789``) do not hide it. Nor does ``_``
  before a prefixed token or JWT, or after a fixed-length one (``_ghp_..._``, ``__sk_live_...__``).
* Numbers in a list separated by single spaces run into one another (``4111111111111111
  4012888888881881``, ``123 45 6789 234 56 7890``): where the whole run matches nothing, its
  longest leading groups that match are the finding (unless they would end inside a later number's
  own finding, which then stands; so must a whole run that matches, when its last group starts a
  number read across dashes: ``+44 20 7946 123--45--6789`` is the phone number ``+44 20 7946`` and
  the SSN; an SSN taken this way needs "ssn" or "social security" in the 40
  characters before it, since any list of numbers has 3-2-4 windows), and each later number is
  tried the same way, so every number of the list is found. The cost: a row of random
  space-separated 4-digit numbers now has a Luhn-valid, IIN-known 4-group window (a "card") in
  about 15 % of 8-number rows (3.5 % before); rows of years or of ordinary integers, none.
* A card glued to another number keeps none of its digits in the clear. No number is read after
  a dash and a digit, nor ends before one (``12--123--45--6789`` stays unread), and a later
  number's finding stands against a list's leading groups, so a card could lose its first groups
  to a phone number or an SSN read across them, or be left unread: ``555 123-4111 1111 1111 1111``
  was ``[PHONE] 1111 1111 1111``. Every digit group also starts a card reading whatever is glued
  to it (13-19 digits in a card's groups joined by single spaces and dashes, ``-`` ``--`` `` - ``
  `` -- ``, in any mix or by dots alone, a known IIN, Luhn; no letter glued to it, and a card of one
  group not glued to a ``.``, ``:`` or ``/`` with a digit beyond it: ``0.4111111111111111`` is a
  decimal), and each stretch of it the findings leave uncovered, from its first digit to its last,
  is a ``CREDIT_CARD`` finding: ``[PHONE] [CREDIT_CARD]``, ``[CREDIT_CARD]-2`` for
  ``4111-1111-1111-1111-2``. The uncovered digit groups glued before the card by a dash (``-``,
  ``--``, `` - ``, `` -- ``), a dot, or a space when a dash follows the card's first group, each
  joined to the next by one of these or a single space, or by a parenthesised area code
  (``(555) ``, ``(555)``) before one, back to one a letter is glued to, join it: an SSN or a phone
  number there is refused by the readers, so ``123-45-6789-4111 1111 1111 1111``,
  ``555 123-4111-1111-1111-1111`` and ``555.123.4111.1111.1111.1111`` are each one
  ``[CREDIT_CARD]``, ``(555) 123-4111-1111-1111-1111`` is ``([CREDIT_CARD]`` (an IPv4 address
  glued by a dot is left out: ``10.0.0.1.[CREDIT_CARD]``; a one-group card after a phone
  number's 3-3 groups and a dot is no decimal: ``555 123.4111111111111111`` is one
  ``[CREDIT_CARD]``; a card a phone number reads after its country code is a card,
  ``+1 [CREDIT_CARD]`` for ``+1 4111 1111 1149 9``); a stretch that goes on one its
  card already reaches into extends it (one placeholder). No finding is changed by it but a
  card finding such a stretch runs into (it starts there) and a phone number read over a card after its
  country code (a card from the card's first digit). The cost: such a stretch is a card's remainder, typed ``CREDIT_CARD`` though it
  may be short (``4008`` of ``4008 4111 1111 1111 1111``, where ``4008 4111 1111 1111`` is
  Luhn-valid too), and a decimal, a version or a date glued before a card by a dash or a dot is
  taken in (``0.4111 1111 1111 1111`` is one ``[CREDIT_CARD]``); a dashed run of random 4-digit numbers now holds a card as often as a spaced
  one did already (6.2 % of 5-number rows, 9.7 % of 6-number rows; none before).
* ``AWS_ACCESS_KEY``: AKIA/ASIA/AGPA/AIDA/AROA/ANPA/ANVA/AIPA + 16 of ``[A-Z2-7]`` ("format").
* ``AWS_SECRET_KEY``: an isolated 40-character ``[A-Za-z0-9+/]`` value with upper, lower and
  digits, not hex, entropy >= 3.5 bits/char and "aws" or "secret" within the 64 characters before
  it ("aws-context"), or without that context entropy >= 4.5 and a ``+`` or ``/`` ("entropy>=4.5").
* ``GITHUB_TOKEN`` (``ghp_ gho_ ghu_ ghs_ ghr_`` + 36 alphanumerics, ``github_pat_`` 22 + ``_`` +
  59), ``GITLAB_TOKEN`` (``glpat-`` + 20-50), ``SLACK_TOKEN`` (``xox[baprs]-`` tokens,
  ``https://hooks.slack.com/services/T.../B.../...`` webhooks and app-level tokens
  ``xapp-<digit>-<5-20 of [A-Z0-9]>-<5-20 digits>-<64 lowercase hex>``), ``STRIPE_KEY`` (``sk_live_
  sk_test_ rk_live_ rk_test_`` + 16+ alphanumerics), ``OPENAI_KEY`` (``sk-`` + 32+ of
  ``[A-Za-z0-9_-]`` with upper, lower and digits, e.g. ``sk-proj-...``), ``ANTHROPIC_KEY`` (the
  same shape starting ``sk-ant-``), ``GOOGLE_API_KEY`` (``AIza`` + 35 of ``[A-Za-z0-9_-]``),
  ``GOOGLE_OAUTH_SECRET`` (an OAuth client secret, ``GOCSPX-`` + 28 of ``[A-Za-z0-9_-]``),
  ``NPM_TOKEN`` (``npm_`` + 36 alphanumerics with upper, lower and digits), ``PYPI_TOKEN``
  (``pypi-`` and a macaroon for pypi.org or test.pypi.org, ``AgEIcHlwaS5vcmc`` or
  ``AgENdGVzdC5weXBpLm9yZw``, 70-1024 characters of ``[A-Za-z0-9_-]`` in all), ``SENDGRID_KEY``
  (``SG.`` + 22 + ``.`` + 43 of ``[A-Za-z0-9_-]``), ``TWILIO_KEY`` (an API key SID, ``SK`` + 32
  hex digits with a letter and a digit), ``HUGGINGFACE_TOKEN`` (``hf_`` + 34 letters, 8+ of them
  upper and 8+ lower case, so that a camelCase name such as
  ``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`` is not one), ``SHOPIFY_TOKEN`` (``shpat_ shpca_
  shppa_ shpss_`` + 32), ``DIGITALOCEAN_TOKEN`` (``dop_v1_ doo_v1_ dor_v1_`` + 64),
  ``MAILGUN_KEY`` (``key-`` + 32, not after ``_``, ``-``, ``.`` or a letter or digit and not
  followed by ``-``, ``_`` or ``.`` and a name: ``api_key-<md5>``, ``key-<md5>.json`` are not
  keys), ``DATABRICKS_TOKEN`` (``dapi`` + 32, with an optional ``-N`` suffix of 1-2 digits),
  ``POSTMAN_KEY`` (``PMAK-`` + 24 + ``-`` + 34); in these five the digits are lowercase hex with
  at least one letter and one digit in each part, ``LINEAR_KEY`` (``lin_api_`` + 40
  alphanumerics of at least two of upper, lower, digits), ``DOPPLER_TOKEN`` (``dp.`` + ``ct pt sa
  said scim audit st`` + ``.`` + 40-44 alphanumerics of at least two classes; a service token may
  name its config, ``dp.st.dev.<token>``), ``AZURE_STORAGE_KEY`` (only the value of
  ``AccountKey=`` in a connection string when it is base64 of 64 bytes: 86 characters with upper,
  lower and digits, the last one of ``AQgw``, then ``==``; the same key pasted alone is not
  found by its form): "format". Tokens whose alphabet has
  ``_`` and ``-`` end where that alphabet ends: one character more (``AIza...x``) is a longer
  token, not a key. No vendor's documented example key is excepted beyond the "EXAMPLE" rule
  below (none of Google's could be confirmed).
* ``PRIVATE_KEY``: ``-----BEGIN <label containing PRIVATE KEY>-----`` through the matching END line
  ("pem-armor"); with no END before the next BEGIN, the header and the base64 body that follows
  ("pem-begin").
* ``JWT``: ``eyJ...`` three base64url segments whose first decodes to a JSON-object-shaped text
  with an ``"alg":`` member ("jwt-header-json").
* ``DATABASE_URL_PASSWORD``: the password of ``scheme://user:password@host`` for database and
  broker schemes (postgres, mysql, mariadb, mongodb(+srv), redis(s), amqp(s), mssql, oracle, ...),
  "url-userinfo". The userinfo ends at the authority's last ``@`` (a raw ``@`` in a password is
  kept), or before an address in its query or fragment (``EMAIL`` above) at the last ``@`` before
  that address. Only the password is replaced: ``postgres://app:[DATABASE_URL_PASSWORD]@db/x``
  keeps the host and user, which are useful context and not secret.
* ``GENERIC_SECRET``: a value of 16-256 printable characters without spaces assigned to a name
  with a word like key/secret/token/password/passwd/pwd/pass/auth/credential (``name = "v"``,
  ``name: v``, ``NAME=v``, ``"name": "v"``, ``name := "v"``; Dockerfile's legacy ``ENV NAME v``,
  at a line's start, whose value is the rest of the line, trailing spaces and one pair of
  enclosing quotes dropped; after an HTTP scheme word ``Bearer``, ``Basic`` or ``token``, as in ``Authorization: Bearer v``; a backslash-escaped quote inside a
  quoted value is part of it; the name in one field and the value in another: an element
  ``<password>v</password>`` (or ``<entry key="db.password">v</entry>``) whose closing tag
  matches on the same line (spaces around ``v`` are not part of it; a ``v`` with spaces inside is
  taken whole when one of its words, punctuation around it aside, is a key by itself: only
  ``[A-Za-z0-9+/=_.-]``, a digit, 16+ characters, entropy >= 3.5; or, for a password-like name,
  when it reads as a passphrase, "passphrase": 12+ characters, 2-8 words split by single
  spaces, no common English or placeholder word such as the/your/here/enter/password among
  them, and 3+ words of lower-case letters only, as in ``<password>correct horse battery
  staple</password>``, or a word with a digit among three of lower/upper/digit/symbol, as in
  ``Tr0ub4dor &3``), a ``name``/``key`` field holding the name followed within 200 characters, in the same object, element or YAML list item, by a ``value``
  field, as in ``- name: DB_PASSWORD`` / ``value: v``, ``{"name": "api_key", "value": "v"}`` and
  ``<add key="ApiKey" value="v"/>`` (the two field names may share a camelCase prefix:
  ``ParameterKey=DbPassword,ParameterValue=v``), a command-line flag ``--password v``, ``-pv``
  attached to ``-p`` after a ``-u``/``--user`` flag on the same line, as in ``mysql -u root -pv``,
  ``-u``/``--user user:v`` as curl takes it, sshpass's own ``-p v`` or ``-pv`` (``sshpass -p v
  ssh host``: only ``-v`` flags between ``sshpass`` and ``-p``), and redis-cli's ``-a v`` on the
  line of a ``redis-cli`` command with no ``|;&<>`()`` between, as in ``redis-cli -h host -p
  6379 -a v``); a CDATA
  section ``<password><![CDATA[v]]></password>``; the first line of a YAML block scalar
  (``password: |`` then ``v`` indented deeper on the next line); a bare value ends before
  ``&name=`` or ``&amp;name=``, so only the secret parameter of a query string or form body is
  taken (``?token=v&page=2``). The value needs at least two
  character classes
  and Shannon entropy >= 3.5 bits/char ("entropy>=3.5"). For password-like names (password,
  passwd, pwd, pass, passphrase, pw, passcode) a value of 8+ characters using three of
  lower/upper/digit/symbol is also accepted ("password-charset"): real passwords are often too
  short to reach the entropy threshold. A secret word also counts at the end of a longer word
  (``dbpassword``, ``adminpass``, ``userpwd``, ``myapikey``) and followed by digits or "value"
  (``password1``, ``apiKey2``, ``tokenvalue``). Names ending in a descriptive word (url, path, id, count,
  name, ...) are skipped, as are unquoted identifiers and calls, and unquoted attribute paths
  even with digits (``win32api.RegEnumKey``, ``key: x25519.X25519PublicKey``: dotted names, the
  first a lower-case name of 3+ characters, none starting with a digit). Under a name whose last
  word names an attribute of a credential, not the credential (provider, issuer, audience,
  scheme, realm, tenant, domain, server, service, backend, client, protocol, flow, usage,
  rotation, strength, level, status, region, zone, owner, source, group, role, scope, tier,
  vault, manager, algo, purpose, and plurals such as types, policies, methods; the full list is
  ``_ATTRIBUTE_WORDS`` of the reference), a value that reads as a name is not a secret
  (``auth_provider: google-oauth2-provider``, ``key_status: active-2024-rotated``): runs of
  letters and digits joined by single ``- _ . : /`` that change between lower case, upper case
  and digits at most 4 times (a lower-case letter then an upper-case one or a digit, an upper-case
  letter then a digit, a digit then a letter); nor is a passphrase in an element so named. A
  random value there changes class at nearly every other character and is still found, as is any
  credential known by its form; the cost is a random secret of one character class only
  (``auth_provider: qwhxkzmvplrtybnsdjfa``), which is not found under such a name.

Not findings: placeholders (``${PASS}``, ``<token>``, ``****``, ``changeme``, ``your_...``),
anything containing "EXAMPLE" (any case) in a credential, UUIDs, 32/40/64-hex digests and git SHAs
as generic secrets, version strings, ordinary identifiers (``get_api_key_from_env``).

Overlaps: the longer finding wins; on equal length the type earlier in :data:`FINDING_TYPES`
(the more specific credential) wins; then the earlier one. Then a glued card's uncovered stretches
are added (above). Findings never overlap.

Character classes are ASCII, but a folded view of a text that contains certain non-ASCII
characters is scanned as well: full-width forms (``１２３``, ``ＡＫＩＡ``, ``＠``), the small forms
of punctuation (``﹫``), mathematical Latin letters, superscript and subscript digits, the
decimal digits of every script (outside the BMP too) and the enclosed digits (circled ``①``,
``⓪``, negative ``❶`` ``⓿``, double ``⓵``, dingbat ``➀`` ``➊``, parenthesised ``⑴``, with a full
stop ``⒈`` or a comma ``🄂``: the digit alone, the punctuation being part of the glyph) become
ASCII, the enclosed numbers 10-50 (``⑩``..``⑳``, ``⑽``, ``⒑``, ``⓫``, ``❿``, ``➉``, ``㉑``..``㊿``)
their two digits, Unicode spaces (no-break, narrow, ideographic) a space, Unicode
hyphens and dashes (non-breaking hyphen, en dash, minus) ``-``, and invisible characters
(zero-width space/joiners, soft hyphen, bidi marks and isolates, word joiner, BOM, variation
selectors, tags, combining diacritical marks) are dropped. Readers and most embedders' tokenizers
see through all of these, so ``123-45-67<ZWSP>89`` or a card number grouped with no-break spaces
is found. Findings of the folded view are mapped back to the original text (the span covers the
invisible characters inside it) and added to those of the plain scan; where one overlaps a plain
finding, the two become one span covering both, typed by the overlap rule below, so folding never
leaves part of a finding unredacted. Look-alike letters from other scripts (Cyrillic ``А`` in
``AKIA``) are not folded: a secret written with them is not found; nor are numerals of other
systems (Roman ``Ⅻ``, Ethiopic ``፩``, Kharoshthi, Rumi and Brahmi numbers, fractions), the
circled sans-serif zeros U+1F10B and U+1F10C (no digit value in Unicode). Keycap digits (``1️⃣``) are ASCII digits already, their marks dropped. Letters outside ASCII end an
e-mail address: ``josé.garcía@corp.io`` yields only ``a@corp.io`` (the rest of the local part is
left), and an address at a non-ASCII domain (``john@münchen.de``) is not found.

Encoded values are decoded once, with the rules of the query scanner (``qdrant_guard.scan``), which
finds them: a run of the base64 alphabet of 12+ characters, or of 16+ hex digits (24+ if all
decimal, optionally after ``0x``), that decodes to printable ASCII is decoded and scanned, and if
anything is found there the whole run (with its ``=`` padding) becomes one finding of the strongest
type found, its validator suffixed ``+base64`` or ``+hex`` (``MTIzLTQ1LTY3ODk=`` is an SSN,
"ssa-rules+base64"). Escapes (``%XX``, ``\\xXX``, ``\\uXXXX``/``\\UXXXXXXXX`` (a surrogate pair of
``\\u`` escapes, as JSON writes U+10000 and up, is one), the one-character
escapes ``\\n \\r \\t \\b \\f \\" \\' \\/`` of JSON and string literals, HTML character
references) are decoded in a view of the text, one character each (a ``%XX`` byte read as
Latin-1), and that view is also folded as above (``4111&nbsp;1111&nbsp;1111&nbsp;1111``,
``123-45-67\\u200b89``); its findings are mapped back over the escapes, and those that cover an
escape are suffixed ``+percent``, ``+hex-escape``, ``+unicode-escape``, ``+json-escape``,
``+html-entity``, or ``+escapes`` when they cover several kinds (``123%2D45%2D6789``,
``&#49;&#50;&#51;-45-6789``, ``https:\\/\\/hooks.slack.com\\/...``). A finding next to an escape
is found too (``\\n123-45-6789``, ``{\\"api_key\\": \\"...\\"}``), and no finding starts or ends
inside an escape (``\\nalice@x.io`` is redacted to ``\\n[EMAIL]``, not ``\\[EMAIL]``), so a redacted
JSON string still parses. Character references are read
as a browser reads them: numeric ones with any leading zeros, without the semicolon, and
``&#128;``-``&#159;`` as Windows-1252 (``&#150;`` is an en dash); named ones by HTML5's table, not
only the scanner's list (``&UnderBar;`` is ``_``), and its legacy names without the semicolon
(``4111&nbsp1111&nbsp1111&nbsp1111``). Not decoded: base64 of base64 (one level only), base64url,
shorter runs, encodings of non-ASCII or binary data, and the named references that stand for
two characters (``&fjlig;``).
docs/threat-model.md lists these limits.
``PROPRIETARY`` is not a result of :func:`classify_text`: it is a policy label for content whose
owner says so, and no property of the text reveals it.
"""
from __future__ import annotations

import base64
import html
import html.entities
import re
import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Callable

from . import scan as _scan
from ._impl import load_kernel
from .errors import GuardArgumentTypeError

__all__ = [
    "FINDING_TYPES",
    "Finding",
    "classify_text",
    "find_sensitive",
    "redact",
    "redact_with_findings",
    "replace_findings",
]

_kernel = load_kernel("_detect", "_detect_py")

#: Every finding type, strongest first (this order breaks ties between equally long overlaps).
FINDING_TYPES: tuple[str, ...] = tuple(_kernel.FINDING_TYPES)
_PII_TYPES = frozenset(_kernel.PII_TYPES)
_RANK = {t: i for i, t in enumerate(FINDING_TYPES)}


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


# Invisible characters dropped from the folded view: soft hyphen, combining marks (diacritics,
# strike-through overlays), Hangul fillers, Mongolian/zero-width/bidi format characters, word
# joiner and invisible operators, variation selectors, BOM, tags.
_DROP_CLASS_BMP = (
    "\u00ad\u0300-\u036f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u1ab0-\u1aff\u1dc0-\u1dff"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u20d0-\u20ff\u3164\ufe00-\ufe0f\ufe20-\ufe2f\ufeff"
    "\uffa0"
)
_DROP_CLASS = _DROP_CLASS_BMP + "\U000e0000-\U000e0fff"
_DROP = re.compile(f"[{_DROP_CLASS}]")
_HYPHENS = "\u2010-\u2015\u2212\ufe58\ufe63"
# The zero of every run of decimal digits outside ASCII in the BMP (Unicode 14; each run is 0-9).
_DIGIT_ZEROS = (
    0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6, 0xE50,
    0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90, 0x1B50, 0x1BB0,
    0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
)
_SPACES = "\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# The same outside the BMP (Unicode 14), mathematical digits aside (their own range below).
_ASTRAL_DIGIT_ZEROS = (
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650, 0x116C0,
    0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50, 0x1E140, 0x1E2F0,
    0x1E950, 0x1FBF0,
)
# Small form variants NFKC folds to one ASCII character (U+FE58 and U+FE63 are _HYPHENS): the
# small @ and full stop spell an e-mail address as the full-width forms do.
_SMALL_FORMS = "\ufe50\ufe52\ufe54-\ufe57\ufe59-\ufe5c\ufe5f-\ufe62\ufe64-\ufe66\ufe68-\ufe6b"
# Superscript and subscript digits (NFKC: the digit; not decimal digits to unicodedata).
_SUPER_SUB = "\u00b2\u00b3\u00b9\u2070\u2074-\u2079\u2080-\u2089"
_SUPER_SUB_RE = re.compile(f"[{_SUPER_SUB}]")
# Digits in a circle, a double or negative circle, parentheses or before a full stop or comma
# (0-9, Numeric_Type=Digit). A reader reads the digit; the parentheses, stop or comma that NFKC
# adds to some are part of the glyph, not a separator, and are not kept.
_ENCLOSED_DIGITS = (
    "\u2460-\u2468\u2474-\u247c\u2488-\u2490\u24ea\u24f5-\u24fd\u24ff\u2776-\u277e\u2780-\u2788"
    "\u278a-\u2792"
)
_ENCLOSED_DIGITS_ASTRAL = "\U0001f100-\U0001f10a"
# The same forms of the numbers 10 to 50 (circled, parenthesised, with a full stop, negative,
# double circled, dingbat): each becomes two digits in the folded view.
_ENCLOSED_NUMBERS = (
    "\u2469-\u2473\u247d-\u2487\u2491-\u249b\u24eb-\u24f4\u24fe\u277f\u2789\u2793\u3251-\u325f"
    "\u32b1-\u32bf"
)
_ENCLOSED_NUMBERS_RE = re.compile(f"[{_ENCLOSED_NUMBERS}]")
_NOT_ONE_WIDE = re.compile(f"[{_DROP_CLASS}{_ENCLOSED_NUMBERS}]")  # width 0 or 2 in the folded view
# The characters the folded view changes: one character class, which ``re`` tests quickly; the
# ranges outside the BMP (tags, digit sets) are only tested in texts that have
# characters outside the BMP.
_FOLD_BMP = f"{_HYPHENS}{_SPACES}{_SMALL_FORMS}{_SUPER_SUB}{_ENCLOSED_DIGITS}{_ENCLOSED_NUMBERS}\uff01-\uff5e" + "".join(f"{chr(z)}-{chr(z + 9)}" for z in _DIGIT_ZEROS)
_FOLD_TRIGGER_BMP = re.compile(f"[{_DROP_CLASS_BMP}{_FOLD_BMP}]")
_FOLD_ASTRAL = f"\U0001d400-\U0001d6a3\U0001d7ce-\U0001d7ff{_ENCLOSED_DIGITS_ASTRAL}" + "".join(f"{chr(z)}-{chr(z + 9)}" for z in _ASTRAL_DIGIT_ZEROS)
_FOLD_TRIGGER = re.compile(f"[{_DROP_CLASS}{_FOLD_BMP}{_FOLD_ASTRAL}]")


def _fold_char(ch: str) -> str:
    """What one character matched by :data:`_FOLD_TRIGGER` becomes in the folded view."""
    c = ord(ch)
    if _DROP.match(ch):
        return ""
    if 0xFF01 <= c <= 0xFF5E:  # full-width ASCII forms
        return chr(c - 0xFEE0)
    if 0xFE50 <= c <= 0xFE6B and c not in (0xFE58, 0xFE63) or 0x1D400 <= c <= 0x1D6A3 or _SUPER_SUB_RE.match(ch):
        nfkc = unicodedata.normalize("NFKC", ch)  # one ASCII character but in the letters' unassigned holes
        return nfkc if len(nfkc) == 1 and nfkc.isascii() else ch
    if unicodedata.decimal(ch, -1) >= 0:
        return str(unicodedata.decimal(ch))
    if unicodedata.digit(ch, -1) >= 0:  # _ENCLOSED_DIGITS
        return str(unicodedata.digit(ch))
    if _ENCLOSED_NUMBERS_RE.match(ch):
        return str(int(unicodedata.numeric(ch)))
    if ch.isspace():
        return "\n" if c in (0x85, 0x2028, 0x2029) else " "
    return "-"  # _HYPHENS


_FOLDED: dict[str, str] = {}  # _fold_char, cached
Spans = list[tuple[int, int, str, str]]


def _folded_spans(text: str, find_spans: Callable[[str], Spans]) -> Spans:
    """The spans of the folded view of ``text``, in ``text``'s offsets (see the module doc)."""
    if text.isascii():
        return []
    # A text has characters outside the BMP iff its UTF-16 form has surrogate pairs.
    astral = len(text.encode("utf-16-le", "surrogatepass")) > 2 * len(text)
    found = set((_FOLD_TRIGGER if astral else _FOLD_TRIGGER_BMP).findall(text))
    if not found:
        return []
    folded = text
    wide = False
    for ch in found:  # each becomes ASCII or nothing, so the order of the replacements is free
        rep = _FOLDED.get(ch)
        if rep is None:
            rep = _FOLDED[ch] = _fold_char(ch)
        folded = folded.replace(ch, rep)
        wide = wide or len(rep) > 1
    if wide:
        return _mapped_back(text, find_spans(folded))
    dropped = [m.start() for m in _DROP.finditer(text)] if len(folded) < len(text) else []

    def original(k: int) -> int:
        # Index in ``text`` of the k-th character that was not dropped: the least fixed point of
        # o = k + (dropped characters at or before o).
        o = k
        while (nxt := k + bisect_right(dropped, o)) != o:
            o = nxt
        return o

    return [(original(s), original(e - 1) + 1, t, v) if dropped else (s, e, t, v)
            for s, e, t, v in find_spans(folded)]


def _mapped_back(text: str, spans: Spans) -> Spans:
    """``spans`` of the folded view of ``text`` in ``text``'s offsets, where characters of the
    view may also be two for one (``⑫``: ``12``). A span that starts or ends inside such a
    character's digits covers the whole character."""
    # The characters whose width in the view is not 1, in order: their offset in ``text``, their
    # offset in the view and their width there.
    at: list[int] = []
    width: list[int] = []
    view: list[int] = []
    shift = 0
    for m in _NOT_ONE_WIDE.finditer(text):
        o = m.start()
        w = len(_FOLDED[m.group()])
        at.append(o)
        view.append(o + shift)
        width.append(w)
        shift += w - 1

    def original(k: int) -> int:
        # The last such character at or before view offset k (the last of equals: a dropped one
        # there is before it) holds k or is followed by k's run of one-for-one characters.
        j = bisect_right(view, k) - 1
        if j < 0:
            return k
        if k < view[j] + width[j]:
            return at[j]
        return at[j] + 1 + (k - view[j] - width[j])

    return [(original(s), original(e - 1) + 1, t, v) for s, e, t, v in spans]


# What the query scanner reports as encoded text: with this min_blob_len only the runs that decode
# to printable ASCII (12+ base64 characters, 16+ hex digits). The scanner sees a copy with the
# escapes blanked (see _blanked), and in escape-dense text every trigger too: its undecodable
# escapes would each cost a violation object.
_BLOB_RULES = dict(max_tokens=None, max_repetition=None, max_ngram_run=None, encoded_payloads=True,
                   max_model_tokens=None, min_blob_len=1 << 62, min_percent_run=None)
_BLANK_TRIGGERS = str.maketrans("%\\&", "   ")
_B64_RUN = re.compile(r"[A-Za-z0-9+/]+")
_PAD = re.compile(r"={1,2}")
# One escape of any kind; the group that matched names the kind (see _ESCAPE_LABELS). Browsers
# decode numeric references with any number of leading zeros and without the semicolon, and the
# legacy names (nbsp, shy, amp, ...) without it too (&nbsp1111). An escaped backslash is not an
# escape here, so that in \\u0031 (\u0031 escaped once more) the \u0031 is still decoded.
_LEGACY_NAMES = "|".join(
    sorted((n for n in html.entities.html5 if not n.endswith(";")), key=len, reverse=True))
_LEGACY_ENTITY = re.compile(f"&(?:{_LEGACY_NAMES})")
_ESCAPE = re.compile(
    r"%([0-9A-Fa-f]{2})|\\x([0-9A-Fa-f]{2})|\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})|\\([\"'/bfnrt])"
    r"|&#0*([0-9]{1,8})(?![0-9]);?|&#[xX]0*([0-9A-Fa-f]{1,6})(?![0-9A-Fa-f]);?"
    rf"|(&[A-Za-z][A-Za-z0-9]{{1,31}};)|(&(?:{_LEGACY_NAMES}))"
)
_ESCAPE_LABELS = ("", "+percent", "+hex-escape", "+unicode-escape", "+unicode-escape", "+json-escape",
                  "+html-entity", "+html-entity", "+html-entity", "+html-entity")
_JSON_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
Escape = tuple[int, int, str, str]  # start, end, the character it stands for, its label
# A trigger and the ASCII character after it, looked up before _ESCAPE is tried: the character a
# two-character escape (a backslash, then one of "'/bfnrt: _ESCAPE's fifth group, which no other
# group matches) stands for, or "" where no escape can start (a backslash not before x, u, U or
# those; a % not before a hex digit; a & not before a letter or #). Absent: the regex decides.
# JSON's escapes of quotes and newlines are most escapes of a payload value's stored form, and
# a Windows path's backslashes most triggers of its readings.
_SHORT_ESCAPES = {
    **{"\\" + c: _JSON_ESCAPES.get(c, c) if c in "\"'/bfnrt" else "" for c in map(chr, range(128)) if c not in "xuU"},
    **{"%" + c: "" for c in map(chr, range(128)) if c not in "0123456789abcdefABCDEF"},
    **{"&" + c: "" for c in map(chr, range(128)) if not (c.isalpha() or c == "#")},
}
_UNESCAPED: dict[str, str | None] = {}  # _unescape, cached


def _unescape(m: re.Match[str]) -> str | None:
    """The character one escape stands for (a ``%XX`` byte read as Latin-1, a character reference
    as a browser reads it); None for a code point that does not exist or a name HTML does not
    define."""
    g = m.lastindex or 0
    if g == 5:
        c = m.group(g)
        return _JSON_ESCAPES.get(c, c)
    if g >= 6:  # html knows the references browsers remap (&#150; is an en dash, &#0; U+FFFD)
        ch = html.unescape(m.group())
        return ch if len(ch) == 1 else None
    n = int(m.group(g), 16)
    return chr(n) if n <= 0x10FFFF else None


def _triggers(text: str) -> list[int]:
    """Offsets of every ``%``, ``\\`` and ``&`` (str.find: a regex scan costs 10x more)."""
    found = []
    for c in "%\\&":
        i = text.find(c)
        while i >= 0:
            found.append(i)
            i = text.find(c, i + 1)
    return sorted(found)


def _surrogate_pair(text: str, high: re.Match[str], ch: str) -> tuple[re.Match[str], str]:
    """A ``\\uXXXX`` high surrogate and the low one that follows it as one escape of the character
    they encode (JSON writes U+10000 and up so: ``\\ud835\\udfcf`` is a bold digit one)."""
    low = _ESCAPE.match(text, high.end())
    if low is None or low.lastindex != 3 or not 0xDC00 <= (lo := int(low.group(3), 16)) <= 0xDFFF:
        return high, ch
    return low, chr(0x10000 + ((ord(ch) - 0xD800) << 10) + (lo - 0xDC00))


def _escapes(text: str, triggers: list[int]) -> list[Escape]:
    """The escapes of ``text``, left to right without overlap (as re.finditer would find them)."""
    out = []
    done = 0
    short = _SHORT_ESCAPES
    for i in triggers:
        if i < done:
            continue
        ch = short.get(text[i : i + 2])
        if ch is not None:
            if ch:
                done = i + 2
                out.append((i, done, ch, "+json-escape"))
            continue
        if (m := _ESCAPE.match(text, i)) is None:
            continue
        key = m.group()
        ch = _UNESCAPED.get(key, "")
        if ch == "":
            ch = _unescape(m)
            if len(_UNESCAPED) < 4096:  # bounded: escapes are few distinct strings in real text
                _UNESCAPED[key] = ch
        label = _ESCAPE_LABELS[m.lastindex or 0]
        if ch is None and m.lastindex == 8 and (legacy := _LEGACY_ENTITY.match(text, i)):
            m, ch = legacy, html.unescape(legacy.group())  # &nbsp1111; is &nbsp then 1111;
        elif m.lastindex == 3 and ch is not None and "\ud800" <= ch <= "\udbff":
            m, ch = _surrogate_pair(text, m, ch)
        done = m.end()
        if ch is not None:
            out.append((i, done, ch, label))
    return out


def _decoded_spans(text: str, find_spans: Callable[[str], Spans]) -> Spans:
    """Findings inside encoded text, as spans of ``text`` (see the module doc).

    A base64 or hex run that decodes to printable ASCII is one finding, of the strongest type found
    in its decoded text (padding included); findings of the view with every escape decoded (%XX,
    \\x, \\u, \\n and the like, HTML character references) are mapped back over their escapes.
    """
    return _decoded_and_escapes(text, find_spans)[0]


def _decoded_and_escapes(text: str, find_spans: Callable[[str], Spans]) -> tuple[Spans, list[Escape]]:
    """:func:`_decoded_spans` and the escapes of ``text`` it read."""
    triggers = _triggers(text)
    escapes = _escapes(text, triggers) if triggers else []
    out: Spans = []
    if len(text) >= 12:
        scanned = _blanked(text, escapes, len(triggers) > 64)
        for v in _scan.scan_query(scanned, **_BLOB_RULES).violations:
            if v.kind not in ("base64_blob", "hex_blob"):
                continue
            m = _B64_RUN.match(scanned, v.position)
            if m is None:
                continue
            run, end = m.group(), m.end()
            if v.kind == "hex_blob":
                digits = run[2:] if run[:2] in ("0x", "0X") else run
                decoded, how = bytes.fromhex(digits).decode("latin-1"), "+hex"
            else:
                decoded, how = base64.b64decode(run + "=" * (-len(run) % 4)).decode("latin-1"), "+base64"
                pad = _PAD.match(text, end)
                end = pad.end() if pad else end
            inner = find_spans(decoded)
            if inner:
                best = min(inner, key=lambda f: (_RANK[f[2]], f[0]))
                out.append((v.position, end, best[2], best[3] + how))
    if escapes:
        out.extend(_escape_spans(text, escapes, find_spans))
    return out, escapes


def _blanked(text: str, escapes: list[Escape], all_triggers: bool) -> str:
    """``text`` with ``escapes`` (and with ``all_triggers`` every ``%``, ``\\`` and ``&``) made
    spaces: the same offsets, and no base64 or hex run starts inside an escape (the ``20`` of
    ``%20MTIzLTQ1LTY3ODk=`` misaligns the run)."""
    if escapes:
        parts = []
        pos = 0
        for a, b, _, _ in escapes:
            parts.append(text[pos:a])
            parts.append(" " * (b - a))
            pos = b
        parts.append(text[pos:])
        text = "".join(parts)
    return text.translate(_BLANK_TRIGGERS) if all_triggers else text


def _escape_spans(text: str, escapes: list[Escape], find_spans: Callable[[str], Spans]) -> Spans:
    """Findings of the view of ``text`` with ``escapes`` decoded (one character each) and of its
    folded view, mapped back to ``text`` and labelled by the escapes they cover."""
    pieces: list[str] = []
    pos = 0
    for a, b, ch, _ in escapes:
        pieces.append(text[pos:a] + ch)
        pos = b
    pieces.append(text[pos:])
    # The view is folded too: an escape often stands for what folding sees through (&nbsp;, \u200b).
    decoded = "".join(pieces)
    found = find_spans(decoded) + _folded_spans(decoded, find_spans)
    if not found:
        # Most views hold nothing (a payload value's escaped quotes and newlines): the map back,
        # which costs each escape more than the view did, is built only for a finding.
        return []
    # Per escape: its index in the view, its span in ``text`` and its label; between escapes the
    # view is ``text`` shifted by what the escapes before saved (memory grows with the escapes only).
    at: list[int] = []
    spans: list[tuple[int, int]] = []
    labels: list[str] = []
    pos = 0
    view = 0
    for a, b, ch, label in escapes:
        view += a - pos
        at.append(view)
        spans.append((a, b))
        labels.append(label)
        view += 1
        pos = b

    def start(k: int) -> int:
        j = bisect_right(at, k) - 1
        if j < 0:
            return k
        return spans[j][0] if at[j] == k else spans[j][1] + (k - at[j] - 1)

    def end(k: int) -> int:  # where the view's character k ends in ``text``
        j = bisect_right(at, k) - 1
        return spans[j][1] if j >= 0 and at[j] == k else start(k) + 1

    # A finding that covers no escape is kept too: an escape next to it can be what hid it from
    # the plain scan (\n123-45-6789, {\"api_key\": \"...\"}).
    out: Spans = []
    for s, e, t, v in found:
        covered = set(labels[bisect_left(at, s):bisect_left(at, e)])
        how = "" if not covered else covered.pop() if len(covered) == 1 else "+escapes"
        out.append((start(s), end(e - 1), t, v + how))
    return out


def _find_spans(text: str, find_spans: Callable[[str], Spans] = _kernel.find_spans) -> Spans:
    """The kernel's spans of ``text``, merged with those of its folded and decoded views (see the
    module doc)."""
    spans = find_spans(text)
    cands = set(spans)
    cands.update(_folded_spans(text, find_spans))
    decoded, escapes = _decoded_and_escapes(text, find_spans)
    cands.update(decoded)
    if escapes and cands:  # (nothing found: nothing to move)
        # The plain scan reads an escape's letters as text (the n of \\n before alice@x.io): a
        # span starting or ending inside an escape would cut it, and its replacement leave a lone
        # backslash that breaks the JSON string holding it (llama-index's _node_content).
        cands = _whole_escapes(text, cands, escapes)
    if len(cands) == len(spans) and cands == set(spans):
        return spans
    # Each scan's findings are disjoint; where findings of different views overlap, they become one
    # span covering all of them (nothing of any is left unredacted), typed by the kernels' overlap
    # rule: the longer finding, then the stronger type, then the earlier one.
    # The group's end is kept as it grows: views can chain thousands of findings into one group.
    out: Spans = []
    group: Spans = []
    end = 0
    for c in sorted(cands) + [(len(text) + 1, len(text) + 1, "", "")]:
        if group and c[0] >= end:
            best = min(group, key=lambda g: (g[0] - g[1], _RANK[g[2]], g[0], g[3]))
            out.append((group[0][0], end, best[2], best[3]))
            group = []
        end = max(end, c[1]) if group else c[1]
        group.append(c)
    return out


def _whole_escapes(text: str, spans: set[tuple[int, int, str, str]],
                   escapes: list[Escape]) -> set[tuple[int, int, str, str]]:
    """``spans`` with each start inside an escape moved past it where another span starts there
    (its letters are syntax, not text: the decoded view found what follows), else back to the
    escape's start (covering more never leaks); each end inside one moved to its end. A backslash
    after an odd run of backslashes is the second of an escaped one (``\\\\"`` ends a JSON
    string), not an escape's start: a span ending before its quote keeps it."""
    escapes = [x for x in escapes if text[x[0]] != "\\" or _backslashes_before(text, x[0]) % 2 == 0]
    starts = [a for a, _, _, _ in escapes]
    begun = {s for s, _, _, _ in spans}
    out = set()
    for s, e, t, v in spans:
        j = bisect_right(starts, s) - 1
        if j >= 0 and starts[j] < s < escapes[j][1]:
            s = escapes[j][1] if escapes[j][1] < e and escapes[j][1] in begun else starts[j]
        j = bisect_right(starts, e - 1) - 1
        if j >= 0 and starts[j] < e < escapes[j][1]:
            e = escapes[j][1]
        out.add((s, e, t, v))
    return out


def _backslashes_before(text: str, i: int) -> int:
    n = 0
    while i - n > 0 and text[i - n - 1] == "\\":
        n += 1
    return n


def _check_text(fn: str, text: object) -> None:
    if not isinstance(text, str):
        raise GuardArgumentTypeError(f"{fn}() argument 'text' must be str, not {type(text).__name__}")


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
        for s, e, t, v in _find_spans(text)
    ]


def one_value_reader() -> Callable[[str], list[Finding]]:
    """:func:`find_sensitive` for the readings of one value (the payload screen reads a value plain
    and then as JSON escapes it), keeping the kernel's spans of each text it reads for the next
    readings: the escaped reading's view with its escapes decoded is the plain reading's text again
    (``name: "line 1\\nline 2"`` decodes to ``name: "line 1<newline>line 2"``), which the kernel
    has read. The kernel's spans depend on the text alone, so every reading's findings are
    :func:`find_sensitive`'s. Drop it with the value: it holds the texts it read."""
    seen: dict[str, Spans] = {}
    kernel = _kernel.find_spans

    def spans(text: str) -> Spans:
        got = seen.get(text)
        if got is None:
            got = seen[text] = kernel(text)
        return list(got)  # the caller's own list, as the kernel's is

    def read(text: str) -> list[Finding]:
        _check_text("find_sensitive", text)
        return [Finding(t, s, e, v, "PII" if t in _PII_TYPES else "CREDENTIAL")
                for s, e, t, v in _find_spans(text, spans)]

    return read


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
    return replace_findings(text, findings), findings


def replace_findings(text: str, findings: Sequence[Finding]) -> str:
    """Replace just ``findings`` (disjoint, in order, as :func:`find_sensitive` returns them) in
    ``text`` with ``[TYPE]``: a subset of a text's findings redacts only those."""
    parts: list[str] = []
    pos = 0
    for f in findings:
        parts.append(text[pos : f.start])
        parts.append(f"[{f.type}]")
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts)


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
