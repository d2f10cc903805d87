"""A new user's library path: an existing qdrant-client 1.20 RAG script switched to the guard.

The README's quick start and bench command run as written (tests/test_docs_examples.py); these
are the other frictions a first-time user met on the way (docs/security-testing.md, "Library
new-user review"): a policy path given as ``pathlib.Path`` that runs but that mypy refused, a
``help()`` that never named ``query_text=``, a one-text embedder refused without saying that the
embedder gets a list, untagged points capped to 4 of 10 by a key whose reference did not say so,
the AWS documentation's example key that a user tries first and the detector by design skips,
an intent refusal of a query the task needed that named no part of the policy, the
credential file's path passed where its token belongs, an expired credential's advice to
"reconnect", which a local store refuses while the first client is open, and the points a store
held before the switch, which reads return as stored and README never mentioned.
Each test fails on the code or docs before its fix, except where a comment says it pins a claim.
"""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import models

from guardkit import create, make_kit
from qdrant_guard import AsyncQdrantClient, GuardArgumentTypeError, GuardRefusal, Principal, QdrantClient
from qdrant_guard.detect import find_sensitive
from qdrant_guard.policy import CollectionPolicy
from qdrant_guard.textguard import EmbedderError

ROOT = Path(__file__).resolve().parent.parent

PLAIN_OWNER = {"class": "PII", "owner": "hr", "raw_in_boundary": True, "text_field": "text",
               "intent": {"enabled": False}}


def _policy_file(tmp: Path) -> Path:
    """A policy file a new user writes: one PII collection ``kb`` owned by boundary hr."""
    kit = make_kit(tmp)
    pub = kit.authority_pub["hr"]
    path = tmp / "policy.toml"
    path.write_text(textwrap.dedent(f"""\
        signing_key = "{kit.guard_key_path}"
        [boundaries.hr]
        authority_keys = ["{pub}"]
        [collections.kb]
        class = "PII"
        owner = "hr"
        text_field = "text"
        """))
    return path


def test_a_policy_path_given_as_pathlib_path_runs_and_type_checks(tmp_path: Path) -> None:
    # Before: guard= was typed GuardConfig | str | None, so `guard=Path(...)`, which has always
    # run, was an arg-type error under mypy for a package that ships py.typed.
    policy = _policy_file(tmp_path)
    client = QdrantClient(":memory:", guard=policy)  # runs (it did before too)
    assert client.guard is not None and client.guard.config.policy_for("kb").owner == "hr"
    client.close()
    usage = tmp_path / "newuser_usage.py"
    usage.write_text(textwrap.dedent("""\
        from pathlib import Path

        import numpy as np
        import numpy.typing as npt
        from qdrant_client import models

        from qdrant_guard import AsyncQdrantClient, GuardRefusal, Principal, QdrantClient, load_policy

        policy = Path(__file__).parent / "policy.toml"


        def embed(texts: list[str]) -> npt.NDArray[np.float32]:
            return np.zeros((len(texts), 4), dtype=np.float32)


        def rows(texts: list[str]) -> list[list[float]]:
            return [[0.0] * 4 for _ in texts]


        def main(token: str) -> None:
            client = QdrantClient(path="./store", guard=policy, principal=Principal("a", "hr", token),
                                  embedder=embed)
            also = QdrantClient(":memory:", guard=load_policy(policy), principal=token, embedder=rows)
            aclient = AsyncQdrantClient(":memory:", guard=policy, principal=token)
            try:
                res: models.QueryResponse = client.query_points("kb", query=[0.1] * 4,
                                                                query_text="vacation policy", limit=3)
                print(len(res.points))
            except GuardRefusal as exc:
                print(exc.verdict, exc.directive, exc.point_ids, exc.manifest_digest)
            also.close()
            del aclient
        """))
    env = dict(os.environ, MYPYPATH=str(ROOT))  # this checkout's qdrant_guard, not an installed one
    # The cache `make typecheck` (same flags) fills just before `make test`: a cold run re-checks
    # qdrant-client, numpy and pydantic for ~20 s, a warm one ~1 s. mypy re-checks any module whose
    # source changed since (mtime, size, hash), so a stale entry cannot pass a changed signature.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(ROOT / ".mypy_cache"), str(usage)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


_POLICY_MODELS_USAGE = textwrap.dedent("""\
    from qdrant_guard import CollectionPolicy, GuardConfig, NoisePolicy, SensitivityClass


    def build() -> GuardConfig:
        docs = CollectionPolicy(noise=NoisePolicy(epsilon=0.5), readers=("*",))
        web = CollectionPolicy.model_validate({"class": SensitivityClass.PUBLIC})
        return GuardConfig(collections={"docs": docs, "web": web})
    """)


def test_policy_models_built_in_python_type_check_with_their_defaults(tmp_path: Path) -> None:
    # Before: the policy models gave their defaults positionally (Field(1.0, gt=0)), which type
    # checkers do not read as a default, so under mypy NoisePolicy(epsilon=0.5) was a call-arg error
    # for each field left out (delta, radius, ...), CollectionPolicy() one for "class" and
    # GuardConfig() one for source_path, though all of them run.
    usage = tmp_path / "policy_models_usage.py"
    usage.write_text(_POLICY_MODELS_USAGE)
    scope: dict[str, object] = {}
    exec(compile(_POLICY_MODELS_USAGE, str(usage), "exec"), scope)
    cfg = scope["build"]()
    assert cfg.policy_for("docs").noise.epsilon == 0.5 and cfg.policy_for("web").is_public
    env = dict(os.environ, MYPYPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(ROOT / ".mypy_cache"), str(usage)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("cls", [QdrantClient, AsyncQdrantClient])
def test_help_on_the_client_names_query_text(cls: type) -> None:
    # help(qdrant_guard.QdrantClient) listed guard=, principal= and embedder= but not the one
    # argument the guard adds to a method: query_points keeps qdrant-client's own docstring.
    doc = inspect.getdoc(cls) or ""
    assert "query_text=" in doc and "query_points" in doc
    if cls is QdrantClient:
        assert "pathlib.Path" in doc  # guard= takes one (above)


def _one_text_embed(text: str) -> list[float]:
    """What a RAG script's own embed function looks like: one text in, one vector out."""
    v = np.zeros(16, dtype=np.float32)
    for w in text.lower().split():
        v[hash(w) % 16] += 1.0
    return (v / max(float(np.linalg.norm(v)), 1.0)).tolist()


@pytest.mark.parametrize("embedder", [
    _one_text_embed,                                     # text.lower() on a list: AttributeError
    lambda texts: np.ones(16, dtype=np.float32),         # one row, not a matrix: the shape check
], ids=["raises", "one-row"])
def test_a_one_text_embedder_is_told_it_gets_a_list(tmp_path: Path, embedder: object) -> None:
    # Before: "the embedder failed: AttributeError(\"'list' object has no attribute 'lower'\")"
    # and "returned shape (16,) for 1 text(s); expected (n_texts, dim)", neither saying that the
    # guard calls embedder= with a list of texts or how to adapt a one-text function.
    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"kb": PLAIN_OWNER}), principal=kit.principal("alice", "hr"),
                          embedder=embedder)  # type: ignore[arg-type]
    create(client, "kb")
    doc = models.Document(text="vacation policy", model="mine")
    with pytest.raises(EmbedderError) as write:
        client.upsert("kb", [models.PointStruct(id=1, vector=doc, payload={"text": "vacation policy"})])
    with pytest.raises(EmbedderError) as query:
        client.query_points("kb", query=doc)
    for exc in (write, query):
        assert "called with a list of texts" in str(exc.value)
        assert "lambda texts: [f(t) for t in texts]" in str(exc.value)
    # The advice works: the same function wrapped as the message says.
    fixed = client.with_principal(kit.principal("alice", "hr"))
    fixed.guard.embedder = lambda texts: [_one_text_embed(t) for t in texts]  # type: ignore[union-attr]
    fixed.upsert("kb", [models.PointStruct(id=1, vector=doc, payload={"text": "vacation policy"})])
    assert [p.id for p in fixed.query_points("kb", query=doc).points] == [1]
    client.close()


def test_an_embedder_that_fails_on_its_own_is_not_lectured(tmp_path: Path) -> None:
    # The list hint is for the one-text mistake (a TypeError, AttributeError or ValueError), not
    # for an embedder whose service is down. This pins the rule: it passed before the change too.
    def down(texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding service unreachable")

    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"kb": PLAIN_OWNER}), principal=kit.principal("alice", "hr"),
                          embedder=down)
    create(client, "kb")
    with pytest.raises(EmbedderError) as exc:
        client.query_points("kb", query=models.Document(text="vacation policy", model="mine"))
    assert "unreachable" in str(exc.value) and "list of texts" not in str(exc.value)
    client.close()


def test_the_source_field_reference_says_what_untagged_points_get(tmp_path: Path) -> None:
    # A RAG script without a `source` payload key got 4 of 10 results after the switch, 1 of 2;
    # README said so under "What changes", but the key's own reference (docs/policy.md, and the
    # policy a user copies from README) did not.
    doc = " ".join((CollectionPolicy.model_fields["source_field"].description or "").split())
    assert "Points without it all count as one source" in doc and "4 of 10 at the default 0.4" in doc
    assert "Points without it all count as one source" in " ".join((ROOT / "docs/policy.md").read_text().split())
    readme_policy = (ROOT / "README.md").read_text().split("```toml", 1)[1].split("```", 1)[0]
    assert 'source_field = "source"' in readme_policy and "untagged points count as one source" in readme_policy
    # ... and the claim holds: 30 untagged points, top-10 gives 4, top-2 gives 1, top-1 gives 1.
    kit = make_kit(tmp_path)
    client = QdrantClient(":memory:", guard=kit.config({"kb": PLAIN_OWNER}), principal=kit.principal("alice", "hr"))
    create(client, "kb")
    rng = np.random.default_rng(0)
    client.upsert("kb", [models.PointStruct(id=i, vector=rng.normal(size=16).tolist(), payload={"text": f"doc {i}"})
                         for i in range(30)])
    q = rng.normal(size=16).tolist()
    assert [len(client.query_points("kb", query=q, limit=k).points) for k in (10, 2, 1)] == [4, 1, 1]
    # Tagged with their documents, the same points fill the top-10.
    client.batch_update_points("kb", [models.SetPayloadOperation(set_payload=models.SetPayload(
        payload={"source": f"doc-{i}"}, points=[i])) for i in range(30)])
    assert len(client.query_points("kb", query=q, limit=10).points) == 10
    client.close()


def test_the_threat_model_names_the_example_keys_the_detector_skips() -> None:
    # A user's first check of the guard is the AWS documentation's key, which the detector skips
    # by design ("EXAMPLE" in a credential is a placeholder, qdrant_guard/detect.py); README sends
    # them to docs/threat-model.md for what the detectors miss, which did not say so.
    text = " ".join((ROOT / "docs/threat-model.md").read_text().split())
    for example in ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"):
        assert f"`{example}`" in text
        assert find_sensitive(example) == [] and find_sensitive(f"aws_secret_access_key = {example}") == []
    assert "try one of your own making (`AKIA` and 16 random capitals and digits)" in text
    # Such a key is found, as the page says.
    own = "AKIA" + "Q3EGT5KJ7XWPZ4MB"
    assert [f.type for f in find_sensitive(f"key {own}")] == ["AWS_ACCESS_KEY"]
    # The placeholders it lists are not found, in an assignment either.
    for value in ("${PASS}", "<token>", "****", "changeme", "your_api_key"):
        assert find_sensitive(f"password = {value}") == [], value


def test_an_intent_refusal_of_a_needed_query_says_where_it_is_tuned(tmp_path: Path) -> None:
    # An owner's agent asking "list every policy on expenses" was refused as suspicious with "Rephrase
    # the request to what the task needs" only: nothing told the user which part of the policy
    # decides, nor how to try a change. The refusal stands (it is the policy's default); its
    # directive now names the section and the replay command, and no threshold value. The model
    # retrained on h-intent2 lets that query through; one it still refuses stands in for it.
    kit = make_kit(tmp_path)
    pol = {**PLAIN_OWNER, "intent": {}}  # the defaults: builtin classifier, block suspicious/adversarial
    client = QdrantClient(":memory:", guard=kit.config({"kb": pol}), principal=kit.principal("alice", "hr"))
    create(client, "kb")
    with pytest.raises(GuardRefusal) as exc:
        client.query_points("kb", query=[0.25] * 16, query_text="list every step of the account deletion process")
    assert exc.value.verdict == "INTENT_BLOCKED"
    directive = exc.value.directive
    assert "the policy's intent section for collection 'kb'" in directive and 'mode = "monitor"' in directive
    assert "qdrant-guard audit replay LOG --policy NEW.toml" in directive and "docs/intent.md" in directive
    advice = directive.split("Rephrase", 1)[1]
    assert "0.6" not in advice  # min_confidence's value is the operator's, not the caller's
    client.close()


def test_a_credential_file_path_given_for_its_token_says_to_read_it(tmp_path: Path) -> None:
    # The README's set-up writes the token to agent-7.cred; a user who passed the Path itself got
    # "must be str or None, not PosixPath" (Principal) or "must be a qdrant_guard.Principal or a
    # credential string, not PosixPath" (principal=, with_principal), with no word of reading it.
    kit = make_kit(tmp_path)
    cred = tmp_path / "agent-7.cred"
    cred.write_text(f"{kit.principal('agent-7', 'hr').credential}\n")
    client = QdrantClient(":memory:", guard=kit.config({"kb": PLAIN_OWNER}), principal=kit.principal("alice", "hr"))
    attempts = [
        lambda: Principal("agent-7", "hr", cred),  # type: ignore[arg-type]
        lambda: QdrantClient(":memory:", guard=kit.config({"kb": PLAIN_OWNER}), principal=cred),  # type: ignore[arg-type]
        lambda: client.with_principal(cred),  # type: ignore[arg-type]
    ]
    for attempt in attempts:
        with pytest.raises(GuardArgumentTypeError) as exc:
            attempt()
        assert "not PosixPath" in str(exc.value) and "Path(file).read_text().strip()" in str(exc.value)
    # What it says works.
    view = client.with_principal(Principal("agent-7", "hr", Path(cred).read_text().strip()))
    assert view.guard is not None and view.guard.principal_label == "agent-7@hr"
    client.close()


def test_an_expired_credential_says_how_to_go_on_without_reopening_the_store(tmp_path: Path) -> None:
    # A RAG service on a path= store outlives its credential (default TTL 1 h). Before: "issue a new
    # one ... and reconnect", and a second client on the same path= is refused while the first is
    # open ("Storage folder ... is already accessed by another instance"). with_principal keeps
    # the connection and takes the new token; the directive now says so.
    import time

    kit = make_kit(tmp_path)
    client = QdrantClient(path=str(tmp_path / "store"), guard=kit.config({"kb": PLAIN_OWNER}),
                          principal=kit.principal("alice", "hr", ttl_s=60))
    create(client, "kb")
    real = time.time
    client.guard.clock = lambda: real() + 3600  # type: ignore[union-attr]
    with pytest.raises(GuardRefusal) as exc:
        client.count("kb")
    assert exc.value.verdict == "INVALID_CREDENTIAL"
    assert "(alice@hr) has expired" in exc.value.directive
    assert "client.with_principal(token)" in exc.value.directive
    with pytest.raises(RuntimeError, match="already accessed"):  # what "reconnect" ran into
        QdrantClient(path=str(tmp_path / "store"))
    renewed = client.with_principal(kit.principal("alice", "hr", ttl_s=7200))
    renewed.guard.clock = lambda: real() + 3600  # type: ignore[union-attr]
    assert renewed.count("kb").count == 0
    client.close()


def test_readme_says_offset_pages_can_repeat_or_skip_points(tmp_path: Path) -> None:
    # A RAG script paging with offset= got a point twice and never saw two others after the
    # switch; docs/diversity-budget.md said so, README's list of what changes did not (that list
    # now lives in docs/switching.md, which the README summarises and links).
    readme = " ".join((ROOT / "docs/switching.md").read_text().split())
    assert "pages fetched with `offset` are capped one by one, so they can repeat or skip points" in readme
    assert "exclude it with `models.PayloadSelectorExclude`" in readme
    kit = make_kit(tmp_path)
    noised = {**PLAIN_OWNER, "raw_in_boundary": False}  # the guard noises and receipts every point
    client = QdrantClient(":memory:", guard=kit.config({"kb": PLAIN_OWNER, "noised": noised}),
                          principal=kit.principal("alice", "hr"))
    create(client, "kb", dim=8)  # raw vectors: the ranking, and so the pages, are the same every run
    rng = np.random.default_rng(1)
    client.upsert("kb", [models.PointStruct(id=i, vector=rng.normal(size=8).tolist(),
                                            payload={"text": f"d{i}", "source": f"s{i % 10}"}) for i in range(60)])
    q = rng.normal(size=8).tolist()
    pages = [[p.id for p in client.query_points("kb", query=q, limit=5, offset=o).points] for o in (0, 5, 10)]
    paged = sum(pages, [])
    whole = [p.id for p in client.query_points("kb", query=q, limit=15).points]
    assert len(paged) != len(set(paged)) and set(whole) - set(paged)  # a repeat, and points skipped
    assert len(whole) == len(set(whole)) == 15  # one call gives one list
    # The selector README names leaves the receipt out and keeps the rest.
    create(client, "noised", dim=8)
    client.upsert("noised", [models.PointStruct(id=0, vector=q, payload={"text": "d0", "source": "s0"})])
    assert "_qdrant_guard_receipt" in (client.retrieve("noised", [0])[0].payload or {})
    sel = models.PayloadSelectorExclude(exclude=["_qdrant_guard_receipt"])
    assert client.retrieve("noised", [0], with_payload=sel)[0].payload == {"text": "d0", "source": "s0"}
    client.close()


def test_points_stored_before_the_switch_are_read_as_stored_until_rewritten(tmp_path: Path) -> None:
    # The script's store existed before the switch. Its points were never screened: a reader of
    # another boundary got the SSN, the e-mail and a GitHub token from their payloads, and README
    # did not say so (its change list reads "text is screened and redacted"). README and the
    # threat model now say so and give the re-write; this pins both the limit and the re-write.
    from qdrant_client import QdrantClient as RawClient

    readme = " ".join((ROOT / "docs/switching.md").read_text().split())  # README's full change list
    assert "**Points stored before the switch** (or by any client without the guard) were never screened" in readme
    assert "Data stored before the switch." in (ROOT / "docs/threat-model.md").read_text()
    kit = make_kit(tmp_path)
    store = str(tmp_path / "store")
    text = "John Doe SSN 123-45-6789 email john@corp.com"
    token = "ghp_" + "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"
    raw = RawClient(path=store)
    for name in ("kb", "kb_noised", "kb_kept"):
        create(raw, name)
        raw.upsert(name, [models.PointStruct(id=1, vector=[0.25] * 16,
                                             payload={"text": text, "source": "hr", "api_key": token})])
    # README's re-write, first half: read them with the plain client, then close it.
    legacy, _ = raw.scroll("kb_noised", with_vectors=True)
    raw.close()
    pol = {**PLAIN_OWNER, "readers": ["support"]}
    noised = {**pol, "raw_in_boundary": False}
    kept = {**pol, "keep_payload_text_in_boundary": True}
    owner = QdrantClient(path=store, guard=kit.config({"kb": pol, "kb_noised": noised, "kb_kept": kept}),
                         principal=kit.principal("alice", "hr"))
    reader = owner.with_principal(kit.principal("bob", "support"))
    for name in ("kb", "kb_noised"):
        before = reader.retrieve(name, [1], with_vectors=True)[0]
        assert before.payload == {"text": text, "source": "hr", "api_key": token} and before.vector is None
    # Through the guard only an owner under raw_in_boundary gets the raw vectors back.
    assert owner.scroll("kb_noised", with_vectors=True)[0][0].vector is None
    points, _ = owner.scroll("kb", with_vectors=True)
    assert points[0].vector is not None
    # Second half: upsert them through the guarded client; the credential is refused first.
    with pytest.raises(GuardRefusal) as exc:
        owner.upsert("kb", [models.PointStruct(id=p.id, vector=p.vector, payload=p.payload) for p in points])  # type: ignore[arg-type]
    assert exc.value.verdict == "CREDENTIAL_IN_TEXT"

    def cleaned(pts: list[models.Record]) -> list[models.PointStruct]:
        return [models.PointStruct(id=p.id, vector=p.vector,  # type: ignore[arg-type]
                                   payload={k: v for k, v in (p.payload or {}).items() if k != "api_key"})
                for p in pts]

    owner.upsert("kb", cleaned(points))
    after = reader.retrieve("kb", [1], with_vectors=True)[0]
    assert after.payload == {"text": "John Doe SSN [SSN] email [EMAIL]", "source": "hr"}
    assert after.vector is None  # the owner wrote raw (raw_in_boundary): still not released
    # Without raw_in_boundary the same write noises and receipts the vector, which is released.
    owner.upsert("kb_noised", cleaned(legacy))
    # README's exception: under keep_payload_text_in_boundary reads redact the text field (only).
    shown = reader.retrieve("kb_kept", [1])[0].payload
    assert shown == {"text": "John Doe SSN [SSN] email [EMAIL]", "source": "hr", "api_key": token}
    released = reader.retrieve("kb_noised", [1], with_vectors=True)[0]
    assert released.vector is not None and "_qdrant_guard_receipt" in (released.payload or {})
    assert {k: v for k, v in (released.payload or {}).items() if k != "_qdrant_guard_receipt"} == after.payload
    owner.close()
