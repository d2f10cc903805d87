"""Claims audit 11 (branch h-claims, 2026-12-07): the security statements of README.md,
docs/privacy.md, docs/receipt-format.md, docs/threat-model.md, docs/audit-log.md and the public
docstrings, checked against the code and a real local-mode qdrant-client.

Pinned here (each a statement a user acts on):

1. The error tables name exactly the codes the code raises: README's verdict table is the
   ``Verdict`` enum, docs/receipt-format.md's reasons are ``receipts.REASONS`` and
   ``boundary.CREDENTIAL_REASONS``, docs/audit-log.md's problem table is ``AUDIT_PROBLEMS``.
2. docs/policy.example.toml ("every key, most at their defaults") holds every key of the policy
   schema, and its values are the code's defaults except the keys it sets to show them (listed
   below): a default changed in the code and not in the example fails here. docs/policy.md is
   generated from the same models (tests/test_policy_doc.py).
3. "A receipt proves what its signer asserts, not that the noise was drawn": a trusted signer's
   receipt over a clean, never-noised vector verifies, passes ``check_release`` and is accepted by
   a guarded write, which stores the clean vector.
4. docs/audit-log.md's writer MAC, rebuilt from the page alone (HKDF-SHA256 of the signing key's
   seed, then HMAC-SHA256 over the prefix and the hash bytes), is the MAC a guard writes; and its
   limits hold as stated: a holder of the writer key rewrites an entry after the last checkpoint
   and the log still verifies, MACs and checkpoints included; entries cut off the end, across a
   checkpoint, leave a log that verifies.

Wrong or incomplete and corrected (each test here fails on the text or code before):

5. README's verdict rows: NOISE_REQUIRED left out receipts ``check_release`` refuses,
   INVALID_RECEIPT expiry, TEXT_REQUIRED a blank ``query_text=``, QUERY_REJECTED image queries,
   the ``noise_queries`` refusals and ``model_mismatch``, REFUSED_CROSS_BOUNDARY path-like names
   and the raw handles. A refused receipt's message gave only the generic causes ("forged,
   altered, replayed or signed by an untrusted key" for an expired one): it now ends with the
   first point's own reason (``writes.py``).
6. The threat model's "worst-case DP" bullet gave no figure and neither it nor docs/privacy.md
   said the guarantee is not per user or per document.
7. ``qdrant-guard audit verify`` with no key printed "OK ... hash chain intact" and nothing on
   what it did not check; ``Principal``'s docstring said an unverified principal reaches PUBLIC
   collections only (unlisted ones under ``unlisted = "public"`` too).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_client
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import BaseModel

from qdrant_guard import Verdict, keys
from qdrant_guard.audit import AUDIT_PROBLEMS, AuditLog, verify_audit_file
from qdrant_guard.audit_mac import writer_keys
from qdrant_guard.boundary import CREDENTIAL_REASONS
from qdrant_guard.canonical import canonical_json
from qdrant_guard.noise import check_release, privatize
from qdrant_guard.policy import CollectionPolicy, GuardConfig
from qdrant_guard.receipts import (
    REASONS, RECEIPT_KEY, ReceiptItem, ReceiptSigner, issue_receipts_batch, receipts_for_payload, stored_form,
    verify_receipt,
)
from tests.guardkit import DIM, QdrantClient, audit_records, create, guard_signer, make_kit, models, unit

ROOT = Path(__file__).resolve().parent.parent


def _text(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


# -- 1. error tables ---------------------------------------------------------------------------

@pytest.mark.parametrize("page", ["README.md", "docs/verdicts.md"])
def test_readme_verdict_table_is_the_verdict_enum(page):
    # The README keeps a short table, docs/verdicts.md the full one (moved there 2026-12-08).
    table = _section(_text(page), "## Verdicts", "Every decision is written")
    listed = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            listed |= set(re.findall(r"`([A-Z_]+)`", line.split(" | ")[0]))
    assert listed == {v.value for v in Verdict}


def test_receipt_format_reasons_are_the_codes_verify_returns():
    page = _text("docs/receipt-format.md")
    reasons = _section(page, "### Reasons returned by `verify_receipt`", "### What `verify()` reports")
    named = set(re.findall(r"`([a-z_]+)`", reasons)) - {"verify_receipt", "max_age_s", "max_clock_skew_s", "now", "sig", "batch",
                                                         "format", "alg", "guarantee"}
    assert named == set(REASONS) - {"ok"}
    credential = _section(page, "`verify_credential` checks, in order", "a `reason` attribute")
    assert set(re.findall(r"\(`([a-z_]+)`", credential)) | set(re.findall(r", `([a-z_]+)`\)", credential)) \
        == set(CREDENTIAL_REASONS)


def test_audit_log_problem_table_is_the_codes_verify_reports():
    table = _section(_text("docs/audit-log.md"), "| problem | meaning |", "### Two chains in one file")
    rows = re.findall(r"^\| `([a-z_]+)` \|", table, re.M)
    assert sorted(rows) == sorted(AUDIT_PROBLEMS) and len(rows) == len(set(rows))


# -- 2. the example policy and the schema ---------------------------------------------------------

# Keys the example sets to something else than the default, to show them (a path, a boundary, an
# owner, a budget, the CREDENTIAL and PROPRIETARY collections' own choices).
_SHOWN = {
    "signing_key", "audit_log", "budget_store", "boundaries", "receipts.trusted_keys",
    "collections.*.class", "collections.*.owner", "collections.*.readers", "collections.*.writers",
    "collections.*.raw_in_boundary", "collections.*.text_field", "collections.*.receipt_keys",
    "collections.*.noise_on_write", "collections.*.noise.epsilon", "collections.*.diversity.max_source_coverage",
    "collections.*.diversity.restricted_sources", "collections.*.diversity.max_vectors",
    "collections.*.diversity.charge_scores",
}


def _schema(model: type[BaseModel], prefix: str) -> dict[str, Any]:
    """Every key of ``model`` (its sections flattened) and its default."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = prefix + (field.alias or name)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and name != "default":
            out.update(_schema(ann, key + "."))
        else:
            out[key] = field.get_default(call_default_factory=True)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {getattr(k, "value", k): _plain(v) for k, v in value.items()}
    return getattr(value, "value", value)


def _set_keys(data: dict[str, Any]) -> dict[str, list[Any]]:
    """Each key the example sets, with every value it is given (collections as ``collections.*``)."""
    seen: dict[str, list[Any]] = {}

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if prefix == "" and k in ("collections",):
                for coll in v.values():
                    walk(coll, "collections.*.")
            elif prefix == "" and k in ("boundaries", "epsilon_ceiling", "default"):
                seen.setdefault(k, []).append(v)
            elif isinstance(v, dict) and k in ("noise", "query", "diversity", "intent", "utility", "receipts"):
                walk(v, f"{prefix}{k}.")
            else:
                seen.setdefault(prefix + k, []).append(v)

    walk(data, "")
    return seen


def test_the_example_policy_holds_every_key_at_the_codes_default_or_shown():
    text = _text("docs/policy.example.toml")
    data = tomllib.loads(text)
    schema = {k: v for k, v in _schema(GuardConfig, "").items() if k != "collections"}
    schema.update({"collections.*." + k: v for k, v in _schema(CollectionPolicy, "").items()})
    set_keys = _set_keys(data)
    commented = set(re.findall(r"^#\s*([a-z_]+) = ", text, re.M))
    for key, default in schema.items():
        leaf = key.rsplit(".", 1)[-1]
        assert key in set_keys or leaf in commented, f"{key} is not in docs/policy.example.toml"
        if key in _SHOWN or key not in set_keys:
            continue
        want = (default.model_dump(mode="json", by_alias=True, exclude_unset=True)
                if isinstance(default, BaseModel) else _plain(default))
        for value in set_keys[key]:
            assert value == want, f"{key} = {value!r} in docs/policy.example.toml, default {want!r} in the code"
    # a key shown with its own value is shown, not a forgotten default
    for key in _SHOWN:
        assert key in set_keys, key
    # the commented line that says it is the default is the default
    assert re.search(r'^# max_model_tokens = "auto" +# the default', text, re.M)
    assert schema["collections.*.query.max_model_tokens"] == "auto"


# -- 3. what a receipt proves -------------------------------------------------------------------

def test_a_receipt_over_a_vector_never_noised_verifies_and_is_accepted(tmp_path):
    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
           "intent": {"enabled": False}}
    owner = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    bob = owner.with_principal(kit.principal("bob", "support"))
    clean = np.asarray(unit(np.random.default_rng(3)), dtype=np.float32)
    # The signer draws noise for the parameters, then signs them over the clean vector instead.
    _, params = privatize(clean[None, :], mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01, clip_norm=1.0)
    stored = stored_form(clean, distance="Euclid")
    rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=stored, collection="pii",
                                                               point_id=1, vector_name="")])[0]
    trusted = bob.guard.trusted_receipt_keys
    assert verify_receipt(rec, vector=stored, collection="pii", point_id=1, trusted_keys=trusted).ok
    assert check_release(params) is None
    bob.upsert("pii", [models.PointStruct(id=1, vector=stored.tolist(),
                                          payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    assert audit_records(kit)[-1]["verdict"] == Verdict.ALLOW_RECEIPTED.value
    got = qdrant_client.QdrantClient.retrieve(owner, "pii", [1], with_vectors=True)[0].vector
    assert np.array_equal(np.asarray(got, dtype=np.float32), stored)  # no noise in what was stored


# -- 4. the audit log's writer MAC and its limits ---------------------------------------------------

def _signed_log(tmp_path: Path, n: int, every: int = 3):
    sk, _ = keys.generate_keypair()
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, signer=ReceiptSigner(sk), checkpoint_every=every)
    for i in range(n):
        log.append({"event": "write", "i": i})
    log.close()
    return sk, path


def test_the_writer_mac_is_the_one_the_page_specifies(tmp_path):
    sk, path = _signed_log(tmp_path, 3)  # seq 3 carries the checkpoint
    entry = json.loads(path.read_bytes().splitlines()[-1])
    # ckpt: Ed25519 over b"qdrant-guard audit checkpoint v1\0" || hash bytes, under key id kid
    assert entry["ckpt"]["kid"] == keys.key_id(sk.public_key())
    sk.public_key().verify(base64.b64decode(entry["ckpt"]["sig"]),
                           b"qdrant-guard audit checkpoint v1\0" + bytes.fromhex(entry["hash"]))
    seed = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    mac_key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"qdrant-guard audit entry mac key v1").derive(seed)
    body = {k: v for k, v in entry.items() if k not in ("hash", "ckpt", "mac")}
    assert hashlib.sha256(canonical_json(body)).hexdigest() == entry["hash"]
    assert entry["w"] == keys.key_id(sk.public_key()) and re.fullmatch(r"ed25519:[0-9a-f]{32}", entry["w"])
    want = hmac.new(mac_key, b"qdrant-guard audit entry mac v1\0" + bytes.fromhex(entry["hash"]), "sha256").hexdigest()
    assert entry["mac"] == want


def test_a_writer_key_holder_rewrites_an_entry_after_the_last_checkpoint_undetected(tmp_path):
    sk, path = _signed_log(tmp_path, 5)  # checkpoint at seq 3
    lines = path.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])
    forged = {k: v for k, v in last.items() if k not in ("hash", "mac")}
    forged["record"] = {"event": "write", "i": "rewritten by the key holder"}
    forged["hash"] = hashlib.sha256(canonical_json(forged)).hexdigest()
    forged["mac"] = hmac.new(writer_keys([sk])[last["w"]], b"qdrant-guard audit entry mac v1\0"
                             + bytes.fromhex(forged["hash"]), "sha256").hexdigest()
    path.write_bytes(b"".join(lines[:-1]) + canonical_json(forged) + b"\n")
    rep = verify_audit_file(path, trusted_keys={keys.key_id(sk.public_key()): sk.public_key()}, checkpoint_every=3,
                            writer_keys=writer_keys([sk]))
    assert rep.ok and rep.checkpoints == 2 and rep.unauthenticated == ()  # seq 1 (the first) and 3


def test_entries_cut_off_the_end_across_a_checkpoint_leave_a_log_that_verifies(tmp_path):
    sk, path = _signed_log(tmp_path, 7)  # checkpoints at seq 3 and 6
    full = verify_audit_file(path, trusted_keys={keys.key_id(sk.public_key()): sk.public_key()},
                             checkpoint_every=3, writer_keys=writer_keys([sk]))
    assert full.ok and full.checkpoints == 3 and full.last_seq == 7  # and seq 1, the writer's first
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]))  # seq 5 to 7 gone, the checkpoint at 6 with them
    cut = verify_audit_file(path, trusted_keys={keys.key_id(sk.public_key()): sk.public_key()},
                            checkpoint_every=3, writer_keys=writer_keys([sk]))
    assert cut.ok and cut.checkpoints == 2 and cut.last_seq == 4
    assert cut.last_hash != full.last_hash  # only a copy kept elsewhere shows the cut


def test_audit_verify_without_a_key_says_what_it_did_not_check(tmp_path, capsys):
    from qdrant_guard.cli import main

    _, path = _signed_log(tmp_path, 4)
    capsys.readouterr()
    assert main(["audit", "verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK: 4 entries, hash chain intact (")
    assert "neither checkpoint signatures nor writer MACs were checked" in out



# -- 5. the verdict table's rows, as the code raises them --------------------------------------

def _receipt_write(kit, **item):
    """Bob (a writer outside the owner boundary, noise_on_write off) writes one point under a
    receipt by the guard's key over a vector noised as ``item`` says; returns the verdict and the
    directive of the refusal (or ALLOW_RECEIPTED)."""
    from qdrant_guard import GuardRefusal
    from qdrant_guard.noise import privatize_seeded_for_tests

    pol = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": False,
           "intent": {"enabled": False}}
    extra = {"receipts": {"max_age_s": 60.0}} if "issued_at" in item else {}
    owner = QdrantClient(":memory:", guard=kit.config({"pii": pol}, **extra), principal=kit.principal("alice", "hr"))
    create(owner, "pii", distance=models.Distance.EUCLID)
    bob = owner.with_principal(kit.principal("bob", "support"))
    x = np.asarray([unit(np.random.default_rng(5))], dtype=np.float32)
    at = {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-6, "radius": 0.01, "clip_norm": 1.0}
    noised, params = (privatize_seeded_for_tests(x, seed=1, **at) if item.pop("seeded", False) else privatize(x, **at))
    stored = stored_form(noised[0], distance="Euclid")
    rec = issue_receipts_batch(guard_signer(kit), [ReceiptItem(params=params, vector=stored, collection="pii",
                                                               point_id=1, **item)])[0]
    try:
        bob.upsert("pii", [models.PointStruct(id=1, vector=stored.tolist(),
                                              payload={RECEIPT_KEY: receipts_for_payload({"": rec})})])
    except GuardRefusal as exc:
        return exc.verdict.value if hasattr(exc.verdict, "value") else exc.verdict, str(exc)
    return audit_records(kit)[-1]["verdict"], ""


def test_a_receipt_whose_signed_noise_check_release_refuses_is_noise_required(tmp_path):
    # README: NOISE_REQUIRED covers a verified receipt whose own parameters are no private release,
    # and the refusal names that reason, not only the generic advice.
    verdict, why = _receipt_write(make_kit(tmp_path), seeded=True)
    assert verdict == "NOISE_REQUIRED" and "(point 1: rng_id 'chacha20-seeded-TEST-ONLY" in why
    row = next(line for line in _text("docs/verdicts.md").splitlines() if line.startswith("| `NOISE_REQUIRED`"))
    assert "check_release" in row


def test_an_expired_receipt_is_invalid_receipt(tmp_path):
    import time

    verdict, why = _receipt_write(make_kit(tmp_path), issued_at=time.time() - 3600)
    assert verdict == "INVALID_RECEIPT" and "(point 1: expired)" in why
    row = next(line for line in _text("docs/verdicts.md").splitlines() if line.startswith("| `INVALID_RECEIPT`"))
    assert "expired" in row


def test_a_blank_query_text_beside_a_raw_vector_is_text_required_as_the_readme_row_says(tmp_path):
    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "query": {"require_text": True}}
    alice = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    create(alice, "pii")
    vec = unit(np.random.default_rng(2))
    for given in ({}, {"query_text": " \u200b "}):
        try:
            alice.query_points("pii", query=vec, limit=1, **given)
        except GuardRefusal as exc:
            assert exc.verdict == "TEXT_REQUIRED", exc
        else:
            raise AssertionError(f"query_points with {given} was not refused")
    alice.query_points("pii", query=vec, limit=1, query_text="refund policy")  # the text passes
    row = next(line for line in _text("docs/verdicts.md").splitlines() if line.startswith("| `TEXT_REQUIRED`"))
    assert "no letter or digit" in row


def test_an_image_query_without_allow_images_is_query_rejected_as_the_readme_row_says(tmp_path):
    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    alice = QdrantClient(":memory:", guard=kit.config({"pii": pol}), principal=kit.principal("alice", "hr"))
    create(alice, "pii")
    try:
        alice.query_points("pii", query=models.Image(image="https://example.org/a.png", model="clip"), limit=1)
    except GuardRefusal as exc:
        assert exc.verdict == "QUERY_REJECTED" and "allow_images" in str(exc)
    else:
        raise AssertionError("an image query was sent to inference")
    row = next(line for line in _text("docs/verdicts.md").splitlines() if line.startswith("| `QUERY_REJECTED`"))
    assert "query.allow_images" in row and "noise_queries" in row and "model_mismatch" in row


def test_path_names_and_raw_handles_are_refused_cross_boundary_as_the_readme_row_says(tmp_path):
    from qdrant_guard import GuardRefusal

    kit = make_kit(tmp_path)
    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}
    alice = QdrantClient(":memory:", guard=kit.config({"payroll": pol}, unlisted="public"),
                         principal=kit.principal("alice", "hr"))
    create(alice, "payroll")
    refused = []
    for call in (lambda: alice.delete_collection("pub/../payroll"), lambda: alice.http):
        try:
            call()
        except GuardRefusal as exc:
            refused.append(exc.verdict)
    assert refused == ["REFUSED_CROSS_BOUNDARY"] * 2
    assert alice.collection_exists("payroll")
    assert audit_records(kit)[-2]["details"] == {"reason": "path_segment"}
    row = next(line for line in _text("docs/verdicts.md").splitlines() if line.startswith("| `REFUSED_CROSS_BOUNDARY`"))
    assert "path segment" in row and "`client.http`" in row



# -- 6. what the DP statements do not claim ------------------------------------------------------------

def test_the_threat_model_states_the_worst_case_privacy_md_computes_and_no_per_user_guarantee():
    # docs/privacy.md's worst case is pinned to the calibration by tests/test_claims_audit9.py.
    privacy = " ".join(_text("docs/privacy.md").split())
    worst = re.search(r"So the worst case over arbitrary texts is epsilon ≈ ([\d,]+)", privacy).group(1)
    threat = " ".join(_text("docs/threat-model.md").split())
    bullet = threat[threat.index("**Worst-case DP over arbitrary texts"):]
    bullet = bullet[:bullet.index(" - **")]
    assert f"epsilon about {worst}" in bullet and "per released vector" in bullet
    assert "Nor is it per user or per document" in bullet
    assert "it is not a per-user or per-document guarantee" in privacy
    # and the sentence every release carries scopes itself the same way
    _, params = privatize(np.full(8, 8 ** -0.5), mechanism="gaussian", epsilon=1.0, delta=1e-6, radius=0.01,
                          clip_norm=1.0)
    assert "per released vector between any two inputs within L2 distance radius=0.01" in params.guarantee


def test_the_readme_privacy_section_gives_the_default_calibration():
    readme = " ".join(_section(_text("README.md"), "## Privacy guarantee", "## Privacy–utility").split())
    m = re.search(r"At the default PII policy \(Gaussian, epsilon 1 at radius 0\.01, delta 1e-6, 384-d\) sigma is "
                  r"([\d.]+) per coordinate; between two arbitrary texts the same noise gives epsilon ≈ ([\d,]+)\.",
                  readme)
    assert m is not None
    pol = CollectionPolicy().noise
    assert (pol.mechanism, pol.epsilon, pol.radius, pol.delta, pol.clip_norm) == ("gaussian", 1.0, 0.01, 1e-6, 1.0)
    _, params = privatize(np.full(384, 384 ** -0.5), mechanism=pol.mechanism, epsilon=pol.epsilon, delta=pol.delta,
                          radius=pol.radius, clip_norm=pol.clip_norm)
    assert f"{params.scale:.4f}" == m.group(1)
    privacy = " ".join(_text("docs/privacy.md").split())
    assert f"epsilon ≈ {m.group(2)}: no meaningful guarantee" in privacy



# -- 7. the public docstrings ----------------------------------------------------------------------

def test_a_principal_without_a_credential_reaches_public_and_unlisted_public_collections_only(tmp_path):
    from qdrant_guard import GuardRefusal, Principal

    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["*"], "intent": {"enabled": False}},
                      "pub": {"class": "PUBLIC"}}, unlisted="public")
    anon = QdrantClient(":memory:", guard=cfg, principal=Principal("agent-7", "hr"))
    owner = anon.with_principal(kit.principal("alice", "hr"))
    for name in ("pii", "pub", "elsewhere"):
        create(owner, name)
    for name in ("pub", "elsewhere"):  # PUBLIC, and unlisted under unlisted = "public"
        assert anon.count(name).count == 0
    try:
        anon.count("pii")
    except GuardRefusal as exc:
        assert exc.verdict == "REFUSED_CROSS_BOUNDARY"
    else:
        raise AssertionError("an unverified principal read a PII collection readable by '*'")
    assert 'unlisted = "public"' in Principal.__doc__
