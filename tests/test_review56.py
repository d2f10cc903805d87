"""Review 56 (2026-12-07): PUBLIC queries' PII screen, the e-mail rule in URLs and review 55's
audit changes, attacked.

An ``Image`` given a ``pathlib.Path`` or bytes as its ``image`` is sent by qdrant-client as the
string it serialises to (REST: Qdrant Cloud inference fetches that path or URL), but a query's
screen read any non-str image as pixels and screened nothing of it, so a credential or PII in it
passed on PUBLIC queries (writes read the image as sent already). A signed repair under ``audit_sign_every_entry`` refused a log
whose format-v1 entries are followed by a checkpoint that already vouches for them (a log begun
before format v2, then signed), which the guard itself opens: a torn tail left it stuck. Real
qdrant-client local mode, real files and keys; each ``*refused*``/``*repaired*`` test fails on the
code before the fix.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from guardkit import audit_records, create, make_kit, models, record_sent

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.audit import AuditLog, repair_audit_file, verify_audit_file
from qdrant_guard.receipts import ReceiptSigner
from test_audit_sign_every_entry import _key as _key_files
from test_review55 import _as_v1

AWS = "AKIAJ2QW7XRT5LNPV3YB"


def _public(kit, **pub):
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", **pub}}),
                      principal=kit.principal("alice", "hr"))
    create(cl, "pub")
    return cl


LOCATORS = [
    (Path(f"/srv/img/{AWS}.png"), "CREDENTIAL_IN_TEXT", "['AWS_ACCESS_KEY']"),
    (f"https://x.example/a.png?key={AWS}".encode(), "CREDENTIAL_IN_TEXT", "['AWS_ACCESS_KEY']"),
    (Path("/home/alice@example.com/a.png"), "SENSITIVITY_MISMATCH", "['EMAIL']"),
    (b"https://x.example/u?ssn=123-45-6789", "SENSITIVITY_MISMATCH", "['SSN']"),
]


@pytest.mark.parametrize("image,verdict,kinds", LOCATORS)
def test_a_path_or_bytes_locator_is_refused_in_a_public_query(tmp_path, monkeypatch, image, verdict, kinds):
    kit = make_kit(tmp_path)
    cl = _public(kit)
    # What qdrant-client sends of it: the string (so the guard must read that string).
    sent_form = models.QueryRequest(query=models.Image(image=image, model="m")).model_dump(mode="json")
    assert isinstance(sent_form["query"]["image"], str)
    sent = record_sent(monkeypatch, ("query_points",))
    before = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        cl.query_points("pub", query=models.Image(image=image, model="m"), limit=3)
    assert sent == [] and ei.value.verdict == verdict
    assert ei.value.directive.startswith("query is a models.Image whose path or URL") and kinds in ei.value.directive
    assert "or from an address that holds none of them" in ei.value.directive
    entries = audit_records(kit)[before:]
    assert [e["verdict"] for e in entries] == [verdict]
    for secret in (AWS, "alice@example.com", "123-45-6789"):
        assert secret not in str(entries) and secret not in str(ei.value)


def test_a_path_locator_is_refused_in_a_public_write(tmp_path):
    # Control: the write path read it as sent before the fix too.
    kit = make_kit(tmp_path)
    cl = _public(kit, allow_redaction_on_public=True)
    img = models.Image(image=Path("/home/alice@example.com/a.png"), model="m")
    with pytest.raises(GuardRefusal) as ei:
        cl.upsert("pub", [models.PointStruct(id=1, vector=img, payload={})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH" and "whose path or URL" in ei.value.directive


def test_image_data_and_clean_paths_still_pass(tmp_path, monkeypatch):
    # Pixels (bytes that are no UTF-8, a data: URI) are not read, and a clean Path is sent as given.
    kit = make_kit(tmp_path)
    cl = _public(kit)
    sent = record_sent(monkeypatch, ("query_points",), with_kwargs=True)
    for image in (b"\x89PNG\r\n\x1a\n\x00" + AWS.encode(), "data:image/png;base64,iVBORw0KGgo=",
                  Path("/srv/img/cat.png")):
        try:
            cl.query_points("pub", query=models.Image(image=image, model="m"), limit=3)
        except GuardRefusal:
            raise
        except Exception:  # noqa: BLE001 - qdrant-client's own (no fastembed here)
            pass
        assert sent[-1][1]["query"].image == image


# ------------------------------------------------------------------ audit: a v1 prefix already signed over
def _mixed_log(tmp_path):
    """A log begun before format v2 (v1 entries, by a guard without signing_key), then written by
    a guard that signs every entry once its first checkpoint there covered them."""
    sk, _ = _key_files(tmp_path, "a.key")
    signer = ReceiptSigner(sk)
    p = tmp_path / "audit.jsonl"
    log = AuditLog(p)
    for i in range(3):
        log.append({"event": "old", "i": i})
    log.close()
    log = AuditLog(p, signer=signer, checkpoint_every=5)
    assert "ckpt" in log.append({"event": "first v2"})  # its first entry there is a checkpoint
    log.close()
    log = AuditLog(p, signer=signer, checkpoint_every=5, sign_every_entry=True)  # opens: documented
    log.append({"event": "signed"})
    log.close()
    return p, signer


def test_a_torn_mixed_log_is_repaired_under_sign_every_entry(tmp_path):
    p, signer = _mixed_log(tmp_path)
    with open(p, "ab") as fh:
        fh.write(b'{"seq":6,"torn')
    trusted = {signer.key_id: signer.public_key}
    repair_audit_file(p, signer=signer, trusted_keys=trusted, checkpoint_every=5, sign_every_entry=True)
    lines = [json.loads(x) for x in p.read_bytes().splitlines()]
    assert [e["seq"] for e in lines] == [1, 2, 3, 4, 5, 6] and "ckpt" in lines[-1]
    assert verify_audit_file(p, trusted_keys=trusted, checkpoint_every=5).ok
    log = AuditLog(p, signer=signer, checkpoint_every=5, sign_every_entry=True)  # the guard goes on
    log.append({"event": "after repair"})
    log.close()


def test_v1_entries_no_checkpoint_covers_are_still_refused_by_the_repair(tmp_path):
    # Review 55's attack kept refused: the whole log rewritten in format v1 (its checkpoints
    # dropped), then a torn tail, must not be signed over.
    p, signer = _mixed_log(tmp_path)
    _as_v1(p)
    with open(p, "ab") as fh:
        fh.write(b'{"seq":6,"torn')
    before = p.read_bytes()
    from qdrant_guard import AuditUnauthenticatedError
    with pytest.raises(AuditUnauthenticatedError) as err:
        repair_audit_file(p, signer=signer, trusted_keys={signer.key_id: signer.public_key}, checkpoint_every=5,
                          sign_every_entry=True)
    # (seq 5 is cut by the scan: no checkpoint at its checkpoint seq)
    assert err.value.seqs == (1, 2, 3, 4) and p.read_bytes() == before



# ------------------------------------------------------------------ the e-mail rule in URLs
# Since an address past a URL's first '/' is found (review 56's session, commit 9dd210c), an image
# named for a display density in a URL (https://cdn.example.com/img/logo@2x.png) read as one: a
# web page holding it was refused on a PUBLIC collection. Bare "logo@2x.png" was read so before.
DENSITY = ["https://cdn.example.com/images/logo@2x.png", "https://example.com/static/hero@3x.webp?v=1",
           "![logo](https://raw.githubusercontent.com/o/r/main/assets/icon@2X.PNG)", "see logo@2x.png",
           '<img srcset="/img/a.jpg 1x, /img/a@2x.jpg 2x">']
ADDRESSES = ["https://x.example/avatars/alice@example.com.png", "https://x.example/u?who=alice@example.com",
             "mail alice@2x.com", "https://login.example.com/authorize?login_hint=bob@contoso.com"]


@pytest.mark.parametrize("impl", ["native", "python"])
def test_an_image_named_for_a_display_density_is_no_address(impl):
    from qdrant_guard import _detect, _detect_py

    mod = _detect if impl == "native" else _detect_py
    for text in DENSITY:
        assert not [s for s in mod.find_spans(text) if "EMAIL" in s], text
    for text in ADDRESSES:
        assert [s for s in mod.find_spans(text) if "EMAIL" in s], text
