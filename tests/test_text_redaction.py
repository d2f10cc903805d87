"""Redaction before embedding and storage (issue: privacy-utility §1), on real local-mode Qdrant."""
from __future__ import annotations

import pytest

from guardkit import DIM, Recorder, count, create, make_kit, models, snapshot
from qdrant_guard import GuardRefusal, QdrantClient

SSN_TEXT = "Jane asked about payroll; her SSN is 123-45-6789"
KEY_TEXT = 'deploy with aws_access_key_id = "AKIAZ7QP3LMNB4XKDT2Q"'


def _client(tmp_path, who=("alice", "hr"), **pol):
    kit = make_kit(tmp_path)
    base = {"class": "PII", "owner": "hr", "writers": ["support"], "noise_on_write": True, "text_field": "text"}
    base.update(pol)
    cfg = kit.config({"c": base, "pub": {"class": "PUBLIC", "text_field": "text"},
                      "pub_ok": {"class": "PUBLIC", "text_field": "text", "allow_redaction_on_public": True}})
    emb = Recorder()
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=emb)
    for name in ("c", "pub", "pub_ok"):
        create(owner, name)
    client = owner if who == ("alice", "hr") else owner.with_principal(kit.principal(*who))
    return client, emb


def test_pii_is_redacted_before_the_embedder_and_in_the_payload(tmp_path):
    client, emb = _client(tmp_path)
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=SSN_TEXT, model="m"),
                                           payload={"text": SSN_TEXT})])
    # The embedder also gets identifiers generalised (the default); the payload only the redaction.
    assert emb.seen == ["Jane asked about payroll; her [CODE] is [SSN]"]
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == "Jane asked about payroll; her SSN is [SSN]"


def test_payload_pii_kept_inside_the_owner_boundary_when_the_policy_says_so(tmp_path):
    client, emb = _client(tmp_path, raw_in_boundary=True, keep_payload_text_in_boundary=True)
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=SSN_TEXT, model="m"),
                                           payload={"text": SSN_TEXT})])
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == SSN_TEXT          # kept in the payload, inside the owner boundary
    assert "123-45-6789" not in emb.seen[0]     # but never embedded


def test_credentials_are_refused_by_default_and_redacted_when_configured(tmp_path):
    client, emb = _client(tmp_path)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=KEY_TEXT, model="m"))])
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
    assert emb.seen == [] and count(client, "c") == 0
    (tmp_path / "b").mkdir()
    client2, emb2 = _client(tmp_path / "b", credentials_in_text="redact")
    client2.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=KEY_TEXT, model="m"),
                                            payload={"text": KEY_TEXT})])
    assert emb2.seen == ['deploy with [CODE] = "[AWS_ACCESS_KEY]"']
    (_, payload, _), = snapshot(client2, "c")
    assert "AKIA" not in payload["text"]


def test_public_collections_refuse_mislabelled_text_unless_redaction_is_allowed(tmp_path):
    client, emb = _client(tmp_path)
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": SSN_TEXT})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    assert count(client, "pub") == 0
    client.upsert("pub", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": "plain words"})])
    assert count(client, "pub") == 1
    with pytest.raises(GuardRefusal):
        client.upsert("pub_ok", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": KEY_TEXT})])


def test_query_text_is_redacted_before_embedding(tmp_path):
    client, emb = _client(tmp_path, raw_in_boundary=True, intent={"enabled": False})
    client.upsert("c", [models.PointStruct(id=1, vector=[0.2] * DIM, payload={"text": "x"})])
    client.query_points("c", query=models.Document(text="who has SSN 123-45-6789?", model="m"), limit=1)
    assert emb.seen[-1] == "who has [CODE] [SSN]?"


ORDER_TEXT = "Refund order 48213 for Alice Moreau after the TypeError in billing_v2."


def test_identifiers_are_generalised_for_the_embedder_by_default_but_kept_in_the_payload(tmp_path):
    client, emb = _client(tmp_path)
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=ORDER_TEXT, model="m"),
                                           payload={"text": ORDER_TEXT})])
    assert emb.seen == ["Refund order [NUMBER] for [NAME] [NAME] after the [CODE] in [CODE]."]
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == ORDER_TEXT


def test_query_text_identifiers_are_generalised_like_the_documents(tmp_path):
    client, emb = _client(tmp_path, raw_in_boundary=True, intent={"enabled": False},
                          generalize_identifiers=True)
    client.upsert("c", [models.PointStruct(id=1, vector=[0.2] * DIM, payload={"text": "x"})])
    client.query_points("c", query=models.Document(text="why was order 48213 refunded to Alice?", model="m"),
                        limit=1)
    assert emb.seen[-1] == "why was order [NUMBER] refunded to [NAME]?"


def test_with_generalisation_off_the_screened_text_is_embedded(tmp_path):
    client, emb = _client(tmp_path, generalize_identifiers=False)
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=ORDER_TEXT, model="m"))])
    assert emb.seen == [ORDER_TEXT]



def test_payload_pii_kept_inside_the_owner_boundary_does_not_leave_it(tmp_path):
    # keep_payload_text_in_boundary keeps PII for the owner boundary; readers of another boundary
    # get the text redacted, through every read that returns payloads or payload values.
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                            "text_field": "text", "keep_payload_text_in_boundary": True, "intent": {"enabled": False}}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=Recorder())
    create(client, "c")
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=SSN_TEXT, model="m"),
                                           payload={"text": SSN_TEXT, "source": "s"})])
    bob = client.with_principal(kit.principal("bob", "support"))
    redacted = "Jane asked about payroll; her SSN is [SSN]"
    query = [1.0] + [0.0] * (DIM - 1)
    assert bob.retrieve("c", [1])[0].payload["text"] == redacted
    assert bob.scroll("c")[0][0].payload["text"] == redacted
    assert bob.query_points("c", query=query).points[0].payload["text"] == redacted
    assert bob.query_batch_points("c", [models.QueryRequest(query=query, with_payload=True)])[0].points[0].payload["text"] == redacted
    groups = bob.query_points_groups("c", query=query, group_by="text").groups
    assert [g.id for g in groups] == [redacted] and groups[0].hits[0].payload["text"] == redacted
    assert [h.value for h in bob.facet("c", key="text").hits] == [redacted]
    assert client.retrieve("c", [1])[0].payload["text"] == SSN_TEXT  # the owner boundary keeps it
    assert client.facet("c", key="text").hits[0].value == SSN_TEXT


def test_pii_hidden_by_invisible_or_unicode_characters_is_redacted_in_payload_and_embedding(tmp_path):
    # Copied from a web page or Word: a no-break space inside the card number, a zero-width space
    # inside the SSN. A reader sees both numbers, and the embedder's tokenizer drops or splits on
    # these characters, so they must be redacted like the plain forms.
    text = "Card 4111\u00a01111\u00a01111\u00a01111, SSN 123-45-67\u200b89, SSN \uff11\uff12\uff13-\uff14\uff15-\uff16\uff17\uff18\uff19."
    client, emb = _client(tmp_path, generalize_identifiers=False)
    client.upsert("c", [models.PointStruct(id=1, vector=models.Document(text=text, model="m"),
                                           payload={"text": text})])
    assert emb.seen == ["Card [CREDIT_CARD], SSN [SSN], SSN [SSN]."]
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == "Card [CREDIT_CARD], SSN [SSN], SSN [SSN]."
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=2, vector=[0.1] * DIM, payload={"text": text})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"


def test_a_list_of_strings_in_the_text_field_is_screened_like_a_string(tmp_path):
    # Qdrant indexes an array of strings in a text field like one string; a list must not be a way
    # around the redaction (or around the PUBLIC mislabelling check).
    client, _ = _client(tmp_path, raw_in_boundary=True, keep_payload_text_in_boundary=True)
    client.upsert("c", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": ["intro", SSN_TEXT, 7]})])
    (_, payload, _), = snapshot(client, "c")
    # Kept PII is only for a plain string field (the read-side redaction handles strings only).
    assert payload["text"] == ["intro", "Jane asked about payroll; her SSN is [SSN]", 7]
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": [SSN_TEXT]})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
    with pytest.raises(GuardRefusal) as ei:
        client.set_payload("c", payload={"text": [KEY_TEXT]}, points=[1])
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT"


@pytest.mark.parametrize("wrap", [tuple, lambda xs: set(xs), frozenset], ids=["tuple", "set", "frozenset"])
def test_a_tuple_or_set_in_the_text_field_is_screened_like_the_list_it_is_sent_as(tmp_path, wrap):
    # The client sends a tuple or set as a JSON array: stored and indexed like a list of strings.
    client, _ = _client(tmp_path)
    client.upsert("c", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": wrap([SSN_TEXT])})])
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == ["Jane asked about payroll; her SSN is [SSN]"]
    client.set_payload("c", payload={"text": wrap([SSN_TEXT])}, points=[1])
    (_, payload, _), = snapshot(client, "c")
    assert payload["text"] == ["Jane asked about payroll; her SSN is [SSN]"]
    with pytest.raises(GuardRefusal) as ei:
        client.upsert("pub", [models.PointStruct(id=1, vector=[0.1] * DIM, payload={"text": wrap([SSN_TEXT])})])
    assert ei.value.verdict == "SENSITIVITY_MISMATCH"
