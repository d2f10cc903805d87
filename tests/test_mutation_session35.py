"""Tests from mutation pass 11 over the code changed since 739f55e (h-mut11 branch, 2026-12-06).

Each test kills mutants of ``scripts/mutate.py`` (Python) or ``scripts/mutate_c.py``
(native/detect.c) that survived every older test of the module. docs/security-testing.md
("Mutation pass 11") lists the mutants, which test kills each and the equivalent ones.

Real local Qdrant (qdrant-client local mode), real keys and credentials; no mocks. Detector cases
run through both kernels (native and the pure-Python twin must agree) and the public API.
"""
from __future__ import annotations

import pytest
from guardkit import make_kit
from test_key_roles import _support, _with_role
from test_retired_keys import rot  # noqa: F401
from qdrant_client.http import models

from qdrant_guard import ConfigError, QdrantClient, keys
from tests.detect_cases import typed_values
from tests.test_utility_model_reads import MODEL_A, MODEL_B, _clients, _policy, _query


# ------------------------------------------------------------------ querycheck: Document models

@pytest.mark.parametrize("method", ["query_points", "query_batch_points", "query_points_groups"])
def test_a_document_for_a_named_vector_is_held_to_that_vectors_model(tmp_path, method):
    """``_refuse_query_document_model`` looks the model up under the vector queried (``using``):
    with ``isinstance(using, str)`` negated every Document was held to the unnamed vector's model
    (here none), so a Document naming another model than ``embedding_models.image`` reached
    qdrant-client's inference."""
    kit = make_kit(tmp_path)
    _, bob = _clients(kit, _policy(kit, None, embedding_models={"image": MODEL_A}), named=("image", "text"),
                      embedder=None)
    with pytest.raises(ConfigError) as ei:
        _query(bob, method, models.Document(text="the quarterly plan", model=MODEL_B), using="image")
    text = str(ei.value)
    assert "vector 'image'" in text and f"naming model {MODEL_B!r}" in text
    assert f'declares utility.embedding_models.image = "{MODEL_A}"' in text
    # The unnamed key is unset and "text" names no model: a Document for "text" is not refused here.
    with pytest.raises(Exception) as ei:  # no inference backend in local mode here
        _query(bob, method, models.Document(text="the quarterly plan", model=MODEL_B), using="text")
    assert "naming model" not in str(ei.value)


# ------------------------------------------------------------------ detect.c: take_groups

@pytest.mark.parametrize("text, want", [
    # take_groups: "j + 1 < n" -> "j + 2 < n" dropped a last group of one digit that ends the text,
    # so the number was cut before it ("+1 234-567 890"): the finding must cover every digit. The
    # separators are mixed, or the code in parentheses, so that e164_grouped reads them (one
    # consistent separator is chain_same's, which does not use take_groups).
    ("call +1 234-567 890 1", [("PHONE", "+1 234-567 890 1")]),
    ("+44 20-7946 095 8", [("PHONE", "+44 20-7946 095 8")]),
    ("(+44) 20 7946 095 8", [("PHONE", "(+44) 20 7946 095 8")]),
])
def test_a_last_one_digit_group_at_the_end_of_the_text_is_taken(text, want):
    assert typed_values(text) == want


# ------------------------------------------------------------------ keys: check_authority_roles

@pytest.mark.parametrize("role, fix", [
    ("signing_key", "set signing_key to a key of its own"),
    ("receipts.trusted_keys", "remove it from receipts.trusted_keys and list there the .pub"),
    ("audit_trusted_keys", "remove it from audit_trusted_keys and list there the .pub"),
])
def test_an_authority_key_in_a_second_role_is_told_the_fix_of_that_role(rot, role, fix):  # noqa: F811
    """The fix a refusal names follows the role: the signing key is replaced, a listed key removed
    from its list (``where == "signing_key"`` flipped gave each role the other's fix)."""
    key_path, pub, kid = _support(rot)
    with pytest.raises(ConfigError) as err:
        QdrantClient(":memory:", guard=_with_role(rot, role, pub, key_path),
                     principal=rot["kit"].principal("alice", "hr"))
    msg = str(err.value)
    assert kid in msg and fix in msg, msg
    other = ("remove it from" if role == "signing_key" else "set signing_key to a key of its own")
    assert other not in msg, msg


@pytest.mark.parametrize("role", ["receipts.trusted_keys", "audit_trusted_keys", "default.receipt_keys"])
def test_an_unloadable_key_in_a_verifying_role_is_named_by_the_role_check(rot, role):  # noqa: F811
    """check_authority_roles loads every key it compares; one that does not load is a ConfigError
    naming the policy and the knob (with the ``raise`` deleted the key's id was None, matched no
    authority, and the check passed the policy)."""
    key_path, _, _ = _support(rot)
    cfg = _with_role(rot, role, "ed25519:not-a-key", key_path)
    with pytest.raises(ConfigError) as err:
        keys.check_authority_roles(cfg, signing_key_id=None, source="policy.toml")
    msg = str(err.value)
    assert msg.startswith(f"policy.toml: {role}: "), msg


@pytest.mark.parametrize("text, want", [
    # dash_sep: "w && is_digit(...)" -> "||" gave a dash no digit follows its width, so a dashed
    # number ending in "-" or "--" took one more, empty group and was no SSN, card or phone number.
    ("ssn 123--45--6789- next", [("SSN", "123--45--6789")]),
    ("ssn 123 - 45 - 6789 -", [("SSN", "123 - 45 - 6789")]),
    ("123 -- 45 -- 6789 --", [("SSN", "123 -- 45 -- 6789")]),
    ("4111--1111--1111--1111-", [("CREDIT_CARD", "4111--1111--1111--1111")]),
    ("+1 234--56--7890-", [("PHONE", "+1 234--56--7890")]),
])
def test_a_dashed_number_followed_by_a_dash_alone_is_still_read(text, want):
    assert typed_values(text) == want


@pytest.mark.parametrize("text", ["ssn 123 -x 45 -x 6789", "card 4111 -x 1111 -x 1111 -x 1111"])
def test_a_spaced_double_dash_needs_both_dashes_and_both_spaces(text):
    """dash_sep: " -- " is a space, two dashes and a space; "at(j + 2) == '-' && at(j + 3) == ' '"
    with "||" took " -x " for it, and these for an SSN and a card."""
    assert typed_values(text) == []


@pytest.mark.parametrize("text", ["call +49 30 1234", "+44 20-7946", "(+49) 30 1234", "+1 234 5678"])
def test_an_e164_number_of_eight_digits_in_all_is_read(text):
    """e164_ends: 8-15 digits, the country code's counted; "total < 8" -> "<= 8" lost the
    shortest numbers (no test had one of exactly 8)."""
    start = text.index("+") - (1 if "(" in text else 0)
    assert typed_values(text) == [("PHONE", text[start:])]


# ------------------------------------------------------------------ policy: toml_str

def test_a_declared_model_name_is_quoted_as_written_in_a_refusal(tmp_path):
    """A refusal shows the declared model as the policy's TOML line would hold it
    (``policy.toml_str``): non-ASCII as itself, not escaped (``ensure_ascii`` flipped to True
    wrote ``\\u00e9``, which is not what the policy file says)."""
    kit = make_kit(tmp_path)
    declared = "équipe/modèle-ü"
    _, bob = _clients(kit, _policy(kit, declared), embedder=None)
    with pytest.raises(ConfigError) as ei:
        _query(bob, "query_points", models.Document(text="the quarterly plan", model=MODEL_B))
    assert f'declares utility.embedding_model = "{declared}"' in str(ei.value)
    assert "\\u00e9" not in str(ei.value)


@pytest.mark.parametrize("text", ["call 00/44 20 7946 0958", "call 011.44 20 7946 0958", "call 00x44 20 7946 0958"])
def test_an_exit_code_apart_needs_a_space_or_hyphen_before_the_country_code(text):
    """intl00: ``00`` or ``011`` apart from the country code only with a space or hyphen between
    them ("00 44 20 7946 0958"); "in_set(...) && is_digit(...)" -> "||" read any character there."""
    assert typed_values(text) == []


@pytest.mark.parametrize("text, number", [
    ("call 00 7 495 123 456", "00 7 495 123 456"),  # 10 digits with the code: not NANP's 11
    ("call 00 7 195 123 4567", "00 7 195 123 4567"),  # a rest starting 1: only after the code 1 refused
    ("call 011 7 495 123 456", "011 7 495 123 456"),
])
def test_only_the_country_code_1_is_held_to_nanp_rules_after_an_exit_code(text, number):
    """intl00: "nanp = len == 1 && b[c] == '1'" with "||" held the other one-digit code, 7, to
    NANP's length and area codes."""
    assert typed_values(text) == [("PHONE", number)]


@pytest.mark.parametrize("text", ["call 00 49 301 2345", "call 0049 301 2345", "call 011 49 301 2345"])
def test_a_number_after_an_exit_code_needs_ten_digits(text):
    """intl00: 10-15 digits with the code's after ``00``/``011`` (9 here); "nd >= 10" -> "nd >= 9"
    read these, which e164_ends' 8 alone lets through."""
    assert typed_values(text) == []


# ------------------------------------------------------------------ detect: the list veto on a whole run

@pytest.mark.parametrize("text, want", [
    # Found by e164_grouped's "veto && (p < ng || more)" -> "||" and "p < ng" -> "p <= ng" mutants,
    # which read these right: a whole run of groups (spaces and hyphens) whose last group starts a
    # number read across dashes ("123--45--6789") was taken whole, the phone number's finding
    # ending inside the SSN and leaving "--45--6789" in the clear. The list veto now applies to
    # the whole run too (e164_grouped, e164_dotmix and chain_same's whole-run match).
    ("+44 20 7946 123--45--6789", [("PHONE", "+44 20 7946"), ("SSN", "123--45--6789")]),
    ("tel +44 20 7946 123--45--6789", [("PHONE", "+44 20 7946"), ("SSN", "123--45--6789")]),
    ("(+44) 20 7946 123--45--6789", [("PHONE", "(+44) 20 7946"), ("SSN", "123--45--6789")]),
    ("+44 20.7946 123--45--6789", [("PHONE", "+44 20.7946"), ("SSN", "123--45--6789")]),
    ("+1 415.555-0123 123--45--6789", [("PHONE", "+1 415.555-0123"), ("SSN", "123--45--6789")]),
    ("+44 20 7946 0958 123--45--6789", [("PHONE", "+44 20 7946 0958"), ("SSN", "123--45--6789")]),
    ("+44 20 7946 123 - 45 - 6789", [("PHONE", "+44 20 7946"), ("SSN", "123 - 45 - 6789")]),
    # unchanged: nothing read across the run's end
    ("+1 234-56-7890", [("PHONE", "+1 234-56-7890")]),
    ("+44 20 7946 0958 4111--1111--1111--1111", [("PHONE", "+44 20 7946 0958"),
                                                 ("CREDIT_CARD", "4111--1111--1111--1111")]),
])
def test_a_number_whose_last_group_starts_a_dashed_one_is_not_cut(text, want):
    assert typed_values(text) == want


# ------------------------------------------------------------------ utility: calibrate's text queries

def test_calibrate_embeds_text_queries_with_the_eval_model_when_no_model_or_its_own_is_named(tmp_path, capsys):
    """``qdrant-guard calibrate`` with text queries: no ``--embedding-model``, or the eval model's
    own name, is no usage error and the queries are embedded (``named is not None and ...`` with
    "or" refused every run without the option; ``_CliQueryEmbedder.__call__`` returning None failed
    every text run). The real evaluation model; skipped where it is not installed."""
    import json

    import numpy as np
    from qdrant_client import QdrantClient as RawClient

    from qdrant_guard.cli import main
    from qdrant_guard.evaluation.embed import MODEL_ID, model_available
    from qdrant_guard.utility import UtilityRecord

    if not model_available():
        pytest.skip("evaluation model not installed: run scripts/install_eval_deps.sh")
    rng = np.random.default_rng(11)
    store = tmp_path / "store"
    raw = RawClient(path=str(store))
    raw.create_collection("docs", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    raw.upsert("docs", [models.PointStruct(id=i, vector=v.tolist()) for i, v in enumerate(rng.normal(size=(30, 384)))])
    raw.close()
    texts = tmp_path / "t.jsonl"
    texts.write_text("".join(json.dumps(t) + "\n" for t in ["where is the payroll file", "who approved the leave"]))
    for extra in ([], ["--embedding-model", MODEL_ID]):
        out = tmp_path / f"u{len(extra)}.json"
        argv = ["calibrate", "--path", str(store), "--collection", "docs", "--queries", str(texts), "--out", str(out),
                "--no-progress", "--threshold", "0.5", "--epsilons", "8", "--allow-few-queries", *extra]
        assert main(argv) == 0, capsys.readouterr().err
        # Text queries: the record names the model that embedded them, named or not.
        assert UtilityRecord.from_json(out.read_text()).embedding_model == MODEL_ID
