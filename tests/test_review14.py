"""Open points of the twelfth and thirteenth reviews, tried against real local-mode Qdrant. Each
fix's test fails on the code before it (see docs/security-testing.md, "Thirteenth review"); the
last test pins why the twelfth review's point stays open ("Twelfth review", *not fixed*)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient

from guardkit import PAYROLL_DIVERSITY, QdrantClient, create, hr_policy, make_kit, models, unit
from test_budget_size_epochs import PAYROLL
from test_perf_payload_screen import _guard
from test_payload_values import CARD
from qdrant_guard import AsyncQdrantClient

# The text field of points stored around the guard (a client without guard=), or before writes
# screened numbers: a card as an int, as an integral float and in an array, beside a string.
STORED = {1: CARD, 2: float(CARD), 3: [f"card {CARD}", CARD, "fine", 7], 4: f"card {CARD}", 5: 42}
REDACTED = {1: "[CREDIT_CARD]", 2: "[CREDIT_CARD]", 3: ["card [CREDIT_CARD]", "[CREDIT_CARD]", "fine", 7],
            4: "card [CREDIT_CARD]", 5: 42}
QUERY = [1.0] + [0.0] * 15


def _stored_around_the_guard(tmp_path, keep: bool):
    """A local store at ``tmp_path / "store"`` whose collection ``hr`` holds :data:`STORED`,
    written by a client without guard=, and the policy (owner hr, reader support) to read it by."""
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": {**hr_policy({"enabled": False}), "raw_in_boundary": True, "text_field": "text",
                             "keep_payload_text_in_boundary": keep}})
    path = str(tmp_path / "store")
    raw = QdrantClient(path=path)
    create(raw, "hr")
    rng = np.random.default_rng(0)
    raw.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"text": t}) for i, t in STORED.items()])
    raw.close()
    return kit, cfg, path


def _texts(points) -> dict:
    return {p.id: p.payload["text"] for p in points}


def _sync_reads(client) -> list[dict]:
    return [_texts(client.retrieve("hr", list(STORED))), _texts(client.scroll("hr", limit=10)[0]),
            _texts(client.query_points("hr", query=QUERY, limit=10).points),
            _texts(client.query_batch_points("hr", [models.QueryRequest(query=QUERY, limit=10, with_payload=True)])[0].points)]


def _values(client) -> str:
    """What facet and groups over the text field return, as text."""
    groups = client.query_points_groups("hr", query=QUERY, group_by="text", limit=20, group_size=5).groups
    return repr(([g.id for g in groups], [_texts(g.hits) for g in groups],
                 [h.value for h in client.facet("hr", key="text", limit=20).hits]))


def test_a_number_in_the_text_field_is_redacted_for_other_boundaries(tmp_path):
    # Reads redacted a string text field only: a card stored as a number, or in an array, reached
    # bob (another boundary) as stored, while the same card in a string was redacted.
    kit, cfg, path = _stored_around_the_guard(tmp_path, keep=True)
    owner = QdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert _sync_reads(bob) == [REDACTED] * 4
    # The owner boundary keeps the text as stored, numbers as strings.
    assert _sync_reads(owner) == [STORED] * 4
    owner.close()

    async def main():
        client = AsyncQdrantClient(path=path, guard=cfg, principal=kit.principal("bob", "support"))
        got = [_texts(await client.retrieve("hr", list(STORED))), _texts((await client.scroll("hr", limit=10))[0]),
               _texts((await client.query_points("hr", query=QUERY, limit=10)).points)]
        await client.close()
        return got

    assert asyncio.run(main()) == [REDACTED] * 3


def test_number_facet_values_and_group_ids_of_the_text_field_are_redacted(tmp_path):
    # Facet values and group ids are the text field's values: ints came back as stored.
    kit, cfg, path = _stored_around_the_guard(tmp_path, keep=True)
    owner = QdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
    shown = _values(owner.with_principal(kit.principal("bob", "support")))
    assert str(CARD) not in shown and "[CREDIT_CARD]" in shown and "42" in shown
    assert str(CARD) in _values(owner)


def test_without_keep_in_boundary_numbers_pass_reads_as_strings_do(tmp_path):
    # Without keep_payload_text_in_boundary writes redact for every boundary and reads redact
    # nothing: text stored around the guard reaches every boundary as stored, number or string.
    kit, cfg, path = _stored_around_the_guard(tmp_path, keep=False)
    owner = QdrantClient(path=path, guard=cfg, principal=kit.principal("alice", "hr"))
    bob = owner.with_principal(kit.principal("bob", "support"))
    assert _sync_reads(bob) == _sync_reads(owner) == [STORED] * 4


@pytest.mark.parametrize("value, shown", [(CARD, "[CREDIT_CARD]"), (-CARD, "-[CREDIT_CARD]"), (True, True),
                                          (1.5, 1.5), (None, None), ({"a": str(CARD)}, {"a": "[CREDIT_CARD]"})])
def test_the_read_side_reads_a_number_as_the_write_side_does(tmp_path, value, shown):
    # The digits are the write side's (field_screen._number_text): a bool, a fraction are not
    # numbers of the text field there either; an object's strings are text (review 44). What a write stores of the text field, a read
    # outside the owner boundary gives.
    from qdrant_guard.redacted import _redacted_text

    _, guard, pol = _guard(tmp_path)
    for text in (value, [value]):
        stored = guard.guard_payload_text("upsert", "c", pol, {"text": text}, point_id=1, in_boundary=False)["text"]
        assert _redacted_text(text) == stored == (shown if text is value else [shown])


# -- source sizes: why writes to PUBLIC names still drop them (twelfth review, "Cost, not a cap bypass")

def test_a_public_write_through_an_alias_made_around_the_guard_drops_the_sizes(tmp_path):
    # Not a fix: it pins why writes to PUBLIC names are not left out of the drop. An alias made by
    # a client without guard= puts the PUBLIC name "pub" on budgeted "hr"; a write to "pub" needs
    # no access and changes hr's sources, so bob's cached size of before must go.
    kit = make_kit(tmp_path)
    owner = QdrantClient(":memory:", guard=kit.config({"hr": hr_policy(PAYROLL_DIVERSITY), "pub": {"class": "PUBLIC"}}),
                         principal=kit.principal("alice", "hr"))
    create(owner, "hr")
    rng = np.random.default_rng(0)
    owner.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "payroll"}) for i in range(10)])
    RawClient.update_collection_aliases(owner, change_aliases_operations=[models.CreateAliasOperation(
        create_alias=models.CreateAlias(collection_name="hr", alias_name="pub"))])
    bob = owner.with_principal(kit.principal("bob", "support"))
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    assert owner.guard.cached_source_size("hr", "payroll") == 10
    anyone = owner.with_principal(None)
    anyone.delete("pub", points_selector=models.PointIdsList(points=list(range(8))))
    assert owner.guard.cached_source_size("hr", "payroll") is None
    bob.scroll("hr", scroll_filter=PAYROLL, limit=1)
    assert owner.guard.cached_source_size("hr", "payroll") == 2
    # Through such an alias anyone reads the budgeted collection unbudgeted too (the alias rule
    # the guard enforces on the aliases it makes is what keeps this out).
    assert len(anyone.scroll("pub", limit=100)[0]) == 2
