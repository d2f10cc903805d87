"""Review of the filter screen: writes by filter are probes too (delete, payload changes, vector
deletes and conditional upserts by filter, alone or in a batch), screened like reads' filters; and
identifiers under fields named for an attribute of a credential (``auth_provider``) are no credential.

Real local-mode Qdrant, real keys (see guardkit).
"""
from __future__ import annotations

import pytest
from qdrant_client import grpc

from guardkit import audit_records, make_kit, models, record_sent, snapshot
from qdrant_guard import GuardRefusal, QdrantClient, UnsupportedWriteError

SSN = "123-45-6789"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
V = {"a": [0.25] * 16, "b": [0.5] * 16}
WRITE_METHODS = ("delete", "set_payload", "overwrite_payload", "delete_payload", "clear_payload", "update_vectors",
                 "delete_vectors", "upsert", "upload_points", "upload_collection", "batch_update_points",
                 "scroll", "retrieve")


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


@pytest.fixture()
def sent(monkeypatch):
    """The methods of every call that reaches the real (unguarded) client, the guard's own included."""
    return record_sent(monkeypatch, WRITE_METHODS)


def _owner(kit, **policy):
    """alice@hr, owner of PII collection ``c`` (named vectors a and b; raw vectors in boundary),
    which support may read and write; points 1-3 seeded, 1 holding ``SSN``."""
    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "writers": ["support"], "raw_in_boundary": True,
           "intent": {"enabled": False}}
    pol.update(policy)
    cl = QdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
    cl.create_collection("c", vectors_config={n: models.VectorParams(size=16, distance=models.Distance.COSINE)
                                              for n in ("a", "b")})
    cl.upsert("c", [models.PointStruct(id=i, vector=V, payload={"ssn": SSN if i == 1 else f"00{i}", "source": "d1",
                                                                "x": i, "auth_provider": "google-oauth2-provider"})
                    for i in (1, 2, 3)])
    return cl


def _fc(key, match):
    return models.FieldCondition(key=key, match=match)


def _f(cond):
    return models.Filter(must=[cond])


PII = _f(_fc("ssn", models.MatchValue(value=SSN)))
CRED = _f(_fc("token", models.MatchValue(value=STRIPE)))
PLAIN = _f(_fc("source", models.MatchValue(value="d1")))
P = models.PointStruct(id=1, vector=V, payload={"ssn": SSN, "source": "d1", "x": 9})


def _batch(op):
    return lambda c, f: c.batch_update_points("c", [op(f)])


# Each writes to collection c by filter ``f``; the value is where the filter is named in the refusal.
CALLS = {
    "delete.filter": (lambda c, f: c.delete("c", points_selector=f), "points_selector.must[0]"),
    "delete.selector": (lambda c, f: c.delete("c", points_selector=models.FilterSelector(filter=f)),
                        "points_selector.filter.must[0]"),
    "set_payload": (lambda c, f: c.set_payload("c", payload={"y": 1}, points=f), "points.must[0]"),
    "set_payload.key": (lambda c, f: c.set_payload("c", payload={"y": 1}, key="nested", points=f), "points.must[0]"),
    "overwrite_payload": (lambda c, f: c.overwrite_payload("c", payload={"y": 1}, points=f), "points.must[0]"),
    "delete_payload": (lambda c, f: c.delete_payload("c", keys=["x"], points=f), "points.must[0]"),
    "clear_payload": (lambda c, f: c.clear_payload("c", points_selector=models.FilterSelector(filter=f)),
                      "points_selector.filter.must[0]"),
    "delete_vectors": (lambda c, f: c.delete_vectors("c", vectors=["b"], points=f), "points.must[0]"),
    "update_vectors": (lambda c, f: c.update_vectors("c", [models.PointVectors(id=1, vector={"a": V["a"]})],
                                                     update_filter=f), "update_filter.must[0]"),
    "upsert": (lambda c, f: c.upsert("c", [P], update_filter=f), "update_filter.must[0]"),
    "upload_points": (lambda c, f: c.upload_points("c", [P], update_filter=f, wait=True), "update_filter.must[0]"),
    "upload_collection": (lambda c, f: c.upload_collection("c", vectors=[V], payload=[P.payload], ids=[1],
                                                           update_filter=f, wait=True), "update_filter.must[0]"),
    "batch.delete": (_batch(lambda f: models.DeleteOperation(delete=models.FilterSelector(filter=f))),
                     "update_operations[0].delete.filter.must[0]"),
    "batch.set_payload": (_batch(lambda f: models.SetPayloadOperation(set_payload=models.SetPayload(
        payload={"y": 1}, filter=f))), "update_operations[0].set_payload.filter.must[0]"),
    "batch.overwrite_payload": (_batch(lambda f: models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(
        payload={"y": 1}, filter=f))), "update_operations[0].overwrite_payload.filter.must[0]"),
    "batch.delete_payload": (_batch(lambda f: models.DeletePayloadOperation(delete_payload=models.DeletePayload(
        keys=["x"], filter=f))), "update_operations[0].delete_payload.filter.must[0]"),
    "batch.clear_payload": (_batch(lambda f: models.ClearPayloadOperation(clear_payload=models.FilterSelector(
        filter=f))), "update_operations[0].clear_payload.filter.must[0]"),
    "batch.delete_vectors": (_batch(lambda f: models.DeleteVectorsOperation(delete_vectors=models.DeleteVectors(
        vector=["b"], filter=f))), "update_operations[0].delete_vectors.filter.must[0]"),
    "batch.update_vectors": (_batch(lambda f: models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(
        points=[models.PointVectors(id=1, vector={"a": V["a"]})], update_filter=f))),
        "update_operations[0].update_vectors.update_filter.must[0]"),
    "batch.upsert": (_batch(lambda f: models.UpsertOperation(upsert=models.PointsList(points=[P], update_filter=f))),
                     "update_operations[0].upsert.update_filter.must[0]"),
}
# Calls the guard lets through once the filter passes (update_vectors by filter is refused on
# sensitive collections whatever the filter holds).
ALLOWED = sorted(k for k in CALLS if "update_vectors" not in k)


def _entry(kit):
    return audit_records(kit)[-1]


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_write_filter_matching_on_pii_is_refused_and_nothing_is_sent(kit, sent, call):
    # A delete or payload change by filter went to Qdrant unscreened: delete(MatchValue("123-45-6789"))
    # on ssn answers whether a point holds that SSN (it is gone afterwards), and sends the SSN.
    owner = _owner(kit)
    bob = owner.with_principal(kit.principal("bob", "support"))
    write, where = CALLS[call]
    before, sent[:] = snapshot(owner, "c"), []
    n = len(audit_records(kit))
    for who in (owner, bob):  # filter_pii defaults to "refuse": the owner too
        with pytest.raises(GuardRefusal) as ei:
            write(who, PII)
        assert ei.value.verdict == "QUERY_REJECTED", call
        assert "personal data" in str(ei.value) and "filter_pii" in str(ei.value)
        assert ei.value.details["filter"] == f"{where}.match.value"
        assert ei.value.details["findings"] == ["SSN"]
    assert sent == []
    assert snapshot(owner, "c") == before
    entries = audit_records(kit)[n:]
    assert [e["verdict"] for e in entries] == ["QUERY_REJECTED"] * 2
    assert SSN not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_write_filter_holding_a_credential_is_refused_whatever_filter_pii_says(kit, sent, call):
    owner = _owner(kit, query={"filter_pii": "allow"})
    write, where = CALLS[call]
    before, sent[:] = snapshot(owner, "c"), []
    with pytest.raises(GuardRefusal) as ei:
        write(owner, CRED)
    assert ei.value.verdict == "CREDENTIAL_IN_TEXT", call
    assert ei.value.details["filter"] == f"{where}.match.value"
    assert sent == [] and snapshot(owner, "c") == before
    assert _entry(kit)["verdict"] == "CREDENTIAL_IN_TEXT"
    assert STRIPE not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("call", ALLOWED)
def test_writes_by_a_filter_without_personal_data_go_ahead(kit, call):
    owner = _owner(kit)
    before = snapshot(owner, "c")
    CALLS[call][0](owner, PLAIN)
    assert snapshot(owner, "c") != before
    assert _entry(kit)["verdict"] in ("ALLOW", "ALLOW_IN_BOUNDARY_RAW")


def test_update_vectors_by_a_clean_filter_is_still_refused_as_unsupported(kit):
    owner = _owner(kit)
    with pytest.raises(UnsupportedWriteError, match="update_filter"):
        CALLS["update_vectors"][0](owner, PLAIN)


@pytest.mark.parametrize("setting", ["owner", "allow"])
def test_filter_pii_lets_the_owner_delete_by_pii(kit, sent, setting):
    # The owner boundary must stay able to erase a data subject's points by the value that names them.
    owner = _owner(kit, query={"filter_pii": setting})
    bob = owner.with_principal(kit.principal("bob", "support"))
    if setting == "owner":
        with pytest.raises(GuardRefusal) as ei:
            bob.delete("c", points_selector=models.FilterSelector(filter=PII))
        assert ei.value.verdict == "QUERY_REJECTED"
        assert "owner boundary 'hr'" in str(ei.value)
    sent[:] = []
    (owner if setting == "owner" else bob).delete("c", points_selector=models.FilterSelector(filter=PII))
    assert sent == ["delete"]
    assert sorted(p[0] for p in snapshot(owner, "c")) == [2, 3]
    entry = _entry(kit)
    assert entry["verdict"] == "ALLOW"
    assert entry["details"]["filter_pii"] == [{"filter": "points_selector.filter.must[0].match.value", "key": "ssn",
                                               "match": "MatchValue", "findings": ["SSN"]}]
    assert SSN not in (kit.tmp / "audit.jsonl").read_text()


def test_the_owner_rewrites_payloads_by_pii_with_filter_pii_owner(kit):
    owner = _owner(kit, query={"filter_pii": "owner"})
    owner.set_payload("c", payload={"erased": True}, points=PII)
    owner.overwrite_payload("c", payload={"ssn": SSN, "erased": True}, points=PII)
    entry = _entry(kit)
    assert entry["verdict"] == "ALLOW" and entry["details"]["filter_pii"][0]["filter"] == "points.must[0].match.value"
    owner.batch_update_points("c", [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload={"n": 1}, points=[2])),
        models.DeletePayloadOperation(delete_payload=models.DeletePayload(
            keys=["x"], filter=_f(_fc("ssn", models.MatchValue(value="002"))))),
        models.DeleteOperation(delete=models.FilterSelector(filter=_f(_fc("ssn", models.MatchValue(value=SSN))))),
    ])
    entry = _entry(kit)
    assert entry["verdict"] == "ALLOW" and entry["details"]["operations"] == {"Delete": 1, "DeletePayload": 1,
                                                                              "SetPayload": 1}
    assert [f["filter"] for f in entry["details"]["filter_pii"]] == [
        "update_operations[2].delete.filter.must[0].match.value"]
    assert sorted(p[0] for p in snapshot(owner, "c")) == [2, 3]


def test_a_batch_with_one_probing_filter_is_refused_whole(kit, sent):
    owner = _owner(kit)
    before, sent[:] = snapshot(owner, "c"), []
    with pytest.raises(GuardRefusal) as ei:
        owner.batch_update_points("c", [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={"y": 1}, points=[2])),
            models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=7, vector=V)])),
            models.DeleteOperation(delete=models.FilterSelector(filter=models.Filter(should=[
                _fc("source", models.MatchValue(value="d1")),
                models.NestedCondition(nested=models.Nested(key="people", filter=_f(_fc(
                    "email", models.MatchAny(any=["x", "alice@example.com"])))))]))),
        ])
    assert ei.value.verdict == "QUERY_REJECTED"
    assert ei.value.details["filter"] == "update_operations[2].delete.filter.should[1].nested.filter.must[0].match.any[1]"
    assert ei.value.details["key"] == "people[].email"
    assert sent == [] and snapshot(owner, "c") == before
    assert "alice@example.com" not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("selector", [
    grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(key="ssn", match=grpc.Match(keyword=SSN)))]),
    grpc.PointsSelector(filter=grpc.Filter(must=[grpc.Condition(field=grpc.FieldCondition(
        key="ssn", match=grpc.Match(keyword=SSN)))])),
], ids=["grpc.Filter", "grpc.PointsSelector"])
def test_grpc_write_filters_are_screened(kit, sent, selector):
    owner = _owner(kit)
    before, sent[:] = snapshot(owner, "c"), []
    for write in (lambda: owner.delete("c", points_selector=selector),
                  lambda: owner.clear_payload("c", points_selector=selector),
                  lambda: owner.set_payload("c", payload={"y": 1}, points=selector)):
        with pytest.raises(GuardRefusal) as ei:
            write()
        assert ei.value.verdict == "QUERY_REJECTED"
    assert sent == [] and snapshot(owner, "c") == before


def test_dict_update_filter_is_screened(kit, sent):
    owner = _owner(kit)
    sent[:] = []
    with pytest.raises(GuardRefusal) as ei:
        owner.upsert("c", [P], update_filter={"must": [{"key": "ssn", "match": {"value": SSN}}]})
    assert ei.value.verdict == "QUERY_REJECTED"
    assert sent == []


def test_other_boundaries_may_not_write_by_a_match_on_kept_text(kit, sent):
    # keep_payload_text_in_boundary: a writer of another boundary deleting by MatchPrefix on the
    # text field would learn (from what is left) what the redaction hides from it.
    owner = _owner(kit, text_field="text", keep_payload_text_in_boundary=True)
    owner.upsert("c", [models.PointStruct(id=5, vector=V, payload={"text": f"employee ssn {SSN}"})])
    bob = owner.with_principal(kit.principal("bob", "support"))
    before, sent[:] = snapshot(owner, "c"), []
    with pytest.raises(GuardRefusal) as ei:
        bob.delete("c", points_selector=_f(_fc("text", models.MatchPrefix(prefix="employee ssn 123-45"))))
    assert ei.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert sent == [] and snapshot(owner, "c") == before
    owner.delete("c", points_selector=_f(_fc("text", models.MatchPrefix(prefix="employee ssn 123-45"))))
    assert 5 not in [p[0] for p in snapshot(owner, "c")]


def test_public_collection_write_filters_pass_through(kit):
    # payload_fields = "text_field": the collection stores the address as given (the default
    # refuses it as mislabelled); filters on PUBLIC are not screened either way.
    cl = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC", "payload_fields": "text_field"}}))
    cl.create_collection("pub", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    cl.upsert("pub", [models.PointStruct(id=1, vector=[1.0, 0.0], payload={"email": "bob@example.com"})])
    cl.delete("pub", points_selector=_f(_fc("email", models.MatchValue(value="bob@example.com"))))
    assert cl.count("pub").count == 0


def test_async_write_filter_is_screened(kit):
    import asyncio

    from qdrant_guard import AsyncQdrantClient

    pol = {"class": "PII", "owner": "hr", "intent": {"enabled": False}}

    async def main():
        cl = AsyncQdrantClient(":memory:", guard=kit.config({"c": pol}), principal=kit.principal("alice", "hr"))
        await cl.create_collection("c", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
        with pytest.raises(GuardRefusal) as ei:
            await cl.delete("c", points_selector=PII)
        assert ei.value.verdict == "QUERY_REJECTED"
        with pytest.raises(GuardRefusal) as ei:
            await cl.set_payload("c", payload={"y": 1}, points=CRED)
        assert ei.value.verdict == "CREDENTIAL_IN_TEXT"
        await cl.close()

    asyncio.run(main())


# -- identifiers under fields named for a credential's attribute are no credential -------------------

# Field and value pairs a filter on a PII collection matches with; the detector over `key: value`
# read each as a secret assigned to an auth/token/key/password name.
IDENTIFIERS = [
    ("auth_provider", "google-oauth2-provider"),
    ("authProvider", "google-oauth2-provider"),
    ("users[].auth_provider", "google-oauth2-provider"),
    ("auth_scheme", "oauth2-client-credentials"),
    ("token_issuer", "accounts-google-com-v2"),
    ("token_audience", "api-gateway-prod-v2"),
    ("key_vault", "kv-prod-westeurope-01"),
    ("auth_backend", "ldap2-backend-primary"),
    ("password_strength", "strong-12chars-min"),
    ("key_usage", "digitalSignature-keyEncipherment"),
    ("key_region", "eu-west-1-primary"),
    ("token_status", "expired-after-3600s"),
    ("auth_service", "keycloak-v21-prod"),
    ("auth_client", "web-app-v2-frontend"),
    ("token_types", "access-token-v2-jwt"),
    ("password_policies", "strong-passwords-required-v2"),
    ("auth_methods", "oauth2-saml2-passkey"),
    ("password_hash_algo", "argon2id-v19-m65536"),
    # Already passed (the detector's own stop words); kept so that they stay so.
    ("token_type", "bearer"),
    ("api_key_id", "3f2b8c1e-4d5a-4b6c-9e7f-1a2b3c4d5e6f"),
    ("password_policy", "strong-passwords-required"),
]

# Real secrets stay refused: under a name that is the secret (auth, token, api_key, password,
# client_secret, a trailing `value`), in a value that is no name (random, symbols), in a form the
# detector knows by itself, or holding an assignment of its own.
SECRETS = [
    ("auth", "google-oauth2-provider"),
    ("token", "google-oauth2-provider"),
    ("api_key", "google-oauth2-provider"),
    ("auth_provider_value", "google-oauth2-provider"),
    ("client_secret", "web-app-v2-frontend-1"),
    ("password", "Summer2024-Winter"),
    ("auth_provider", "xK9#mP2$vL7qR4tW"),
    ("auth_provider", "aB3dE5fG7hJ9kL1mN3pQ"),
    ("auth_provider", "A1B2-C3D4-E5F6-G7H8-J9K0"),
    ("auth_provider", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("token_issuer", STRIPE),
    ("auth_provider", "AKIAQ3EGRZ7XPLMN4HTB"),
    ("auth_provider", "password=Xk9mP2vL7qR4tWz8"),
]


@pytest.mark.parametrize("key,value", IDENTIFIERS)
def test_an_identifier_under_a_credential_attribute_field_is_no_credential(kit, key, value):
    owner = _owner(kit)
    for match in (models.MatchValue(value=value), models.MatchAny(any=[value]), models.MatchText(text=value)):
        flt = _f(_fc(key, match))
        owner.scroll("c", scroll_filter=flt, limit=1)
        owner.count("c", count_filter=flt)
        owner.delete("c", points_selector=flt)
        assert _entry(kit)["verdict"] == "ALLOW"


def test_the_reviewers_filter_reads_the_points_it_names(kit):
    owner = _owner(kit)
    got, _ = owner.scroll("c", scroll_filter=_f(_fc("auth_provider", models.MatchValue(
        value="google-oauth2-provider"))), limit=10)
    assert sorted(p.id for p in got) == [1, 2, 3]


@pytest.mark.parametrize("key,value", SECRETS)
def test_a_secret_under_any_field_is_still_refused(kit, sent, key, value):
    owner = _owner(kit, query={"filter_pii": "allow"})
    sent[:] = []
    for match in (models.MatchValue(value=value), models.MatchAny(any=["x", value])):
        for call in (lambda f: owner.scroll("c", scroll_filter=f, limit=1),
                     lambda f: owner.delete("c", points_selector=f)):
            with pytest.raises(GuardRefusal) as ei:
                call(_f(_fc(key, match)))
            assert ei.value.verdict == "CREDENTIAL_IN_TEXT", (key, value)
    assert sent == []
    assert value not in (kit.tmp / "audit.jsonl").read_text()


@pytest.mark.parametrize("call", [
    lambda c: c.delete("c", points_selector=grpc.PointsSelector()),
    lambda c: c.clear_payload("c", points_selector=grpc.Filter(must=[grpc.Condition()])),
    lambda c: c.scroll("c", scroll_filter=grpc.Filter(must=[grpc.Condition()]), limit=1),
], ids=["empty grpc selector", "grpc condition without a field (write)", "grpc condition without a field (read)"])
def test_a_grpc_filter_that_does_not_convert_is_refused_and_audited(kit, sent, call):
    # It raised qdrant-client's ValueError from inside the screen, with no audit entry.
    owner = _owner(kit)
    before, sent[:] = snapshot(owner, "c"), []
    n = len(audit_records(kit))
    with pytest.raises(GuardRefusal) as ei:
        call(owner)
    assert ei.value.verdict == "QUERY_REJECTED" and "cannot check" in str(ei.value)
    assert [e["verdict"] for e in audit_records(kit)[n:]] == ["QUERY_REJECTED"]
    assert sent == [] and snapshot(owner, "c") == before
