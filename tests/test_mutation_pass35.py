"""Mutation pass 35 (docs/security-testing.md): tests that kill the survivors of calibrate_cli.py
(``qdrant-guard calibrate`` run for real on local-mode Qdrant stores) and field_screen's clip of a
finding that begins in the key."""
from __future__ import annotations

import pytest

from qdrant_guard.field_screen import stored_findings, value_findings

# qdrant-client's compatibility check of the absent server of test_calibrate_reads_url, which may
# report in a later test.
pytestmark = pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning")

# A PEM armor found from a header written as the key to the END line in the value: a finding that
# begins in the key, so its start in the value's offsets is clipped to 0 (not -1, nor the value's
# last character, which would leave all but the last character of the key material unredacted).
_PEM_KEY = "-----BEGIN RSA PRIVATE KEY-----"


@pytest.mark.parametrize("value", [
    "MIIEab\n-----END RSA PRIVATE KEY-----",  # quoted reading
    '"MIIEab"\n-----END RSA PRIVATE KEY-----',  # bare reading (a quote inside)
    "MIIEab\\-----END RSA PRIVATE KEY-----",  # bare reading (a backslash inside)
])
def test_a_finding_from_the_key_into_the_value_starts_at_the_values_start(value):
    assert [(f.type, f.start, f.end) for f in value_findings(_PEM_KEY, value)] == [("PRIVATE_KEY", 0, len(value))]


def test_the_stored_reading_clips_a_finding_from_the_key_to_the_values_start():
    value = "MIIEab\n-----END RSA PRIVATE KEY-----"
    assert [(f.type, f.start, f.end) for f in stored_findings(_PEM_KEY, value)] == [("PRIVATE_KEY", 0, len(value))]


# -- qdrant-guard calibrate ------------------------------------------------------------------------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from qdrant_client import QdrantClient, models  # noqa: E402

from test_cli_review import _run, clean_store  # noqa: E402,F401 (a fixture)


@pytest.fixture
def store(clean_store: tuple[Path, Path]) -> tuple[Path, Path]:
    """A real local-mode store of 40 clean 8-d vectors (collection "docs"), and 20 of them as queries."""
    return clean_store


def _calibrate(store: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    return ["calibrate", "--path", str(store[0]), "--collection", "docs", "--queries", str(store[1]),
            "--out", str(out), "--no-progress", "--seed", "1", *extra]


# Argument types: 0 is no radius nor ceiling, a negative number no threshold nor delta, and a word
# is no number (the raise deleted left `value` unbound: a traceback, not a usage error).
@pytest.mark.parametrize(("option", "value", "says"), [
    ("--radius", "0", "not a finite number above 0"),
    ("--epsilon-ceiling", "0", "not a finite number above 0"),
    ("--threshold", "-0.5", "not a relative drop in [0, 1)"),
    ("--threshold", "-1", "not a relative drop in [0, 1)"),
    ("--delta", "-0.1", "not a delta in [0, 1)"),
    ("--threshold", "x", "'x' is not a number; give a relative drop such as 0.05"),
    ("--delta", "x", "'x' is not a number; give a delta such as 1e-6"),
    ("--epsilons", "0", "0 is not a finite epsilon above 0"),
    ("--epsilons", "1,inf", "inf is not a finite epsilon above 0"),
])
def test_calibrate_refuses_an_out_of_range_option_as_a_usage_error(tmp_path, store, capsys, option, value, says):
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out), f"{option}={value}"], capsys)
    assert rc == 2 and "Traceback" not in err
    assert option in err.splitlines()[-1] and says in err.splitlines()[-1], err
    assert not out.exists()


# The parser: the store is required (--path or --url), as are --collection, --queries and --out;
# --url is read (an unreachable server is named, not an unknown option).
@pytest.mark.parametrize("drop", ["--path", "--collection", "--queries", "--out"])
def test_calibrate_requires_the_store_the_collection_the_queries_and_out(tmp_path, store, capsys, drop):
    argv = _calibrate(store, tmp_path / "rec.json")
    i = argv.index(drop)
    del argv[i:i + 2]
    rc, _, err = _run(argv, capsys)
    assert rc == 2 and "Traceback" not in err
    last = err.splitlines()[-1]
    assert "required" in last and (drop if drop != "--path" else "--path --url") in last, err


def test_calibrate_reads_url(tmp_path, store, capsys):
    argv = _calibrate(store, tmp_path / "rec.json")
    argv[1:3] = ["--url", "http://127.0.0.1:9"]  # nothing listens on the discard port
    rc, _, err = _run(argv, capsys)
    assert rc == 2 and "cannot reach Qdrant at --url http://127.0.0.1:9" in err, err


# -- calibrate --policy ----------------------------------------------------------------------------
def _policy(tmp: Path, body: str) -> Path:
    """A policy file whose signing_key is a new key beside it, with the collection tables ``body``."""
    from qdrant_guard import keys

    sk, _ = keys.generate_keypair()
    key = tmp / "guard.key"
    key.write_bytes(keys.private_key_to_pem(sk))
    key.chmod(0o600)
    path = tmp / "policy.toml"
    path.write_text(f'signing_key = "{key}"\n{body}')
    return path


def _record(out: Path):
    from qdrant_guard.utility import UtilityRecord

    return UtilityRecord.from_json(out.read_text())


def test_calibrate_refuses_a_public_policy_collection(tmp_path, store, capsys):
    pol = _policy(tmp_path, '[collections.docs]\nclass = "PUBLIC"\n')
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out, "--epsilons", "1,8"), "--policy", str(pol)], capsys)
    assert rc == 2 and "collection 'docs' is PUBLIC ([collections.docs])" in err, err
    assert "no noise to calibrate" in err and not out.exists()


# Options that agree with the policy: a model where it declares none, a delta laplace_l2 ignores,
# the threshold, ceiling and min_queries it states (each may also be stricter, not equal only), and a
# threshold 1e-12 above the policy's (the comparison's tolerance for a value that went through text).
@pytest.mark.parametrize("extra", [
    ["--embedding-model", "my-org/my-model"], ["--delta", "1e-6"], ["--threshold", "0.9"],
    ["--epsilon-ceiling", "2"], ["--min-queries", "20"], ["--threshold", repr(0.9 + 1e-12)],
], ids=["model", "delta", "threshold", "ceiling", "min-queries", "threshold-tolerance"])
def test_calibrate_policy_takes_an_option_that_agrees(tmp_path, store, capsys, extra):
    pol = _policy(tmp_path, '[collections.docs]\nclass = "PII"\n[collections.docs.noise]\n'
                            'mechanism = "laplace_l2"\ndelta = 0.0\nepsilon = 2.0\n'
                            '[collections.docs.utility]\nmax_recall_drop = 0.9\nmin_queries = 20\n')
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out, "--epsilons", "2"), "--policy", str(pol), *extra], capsys)
    assert rc == 0, err
    rec = _record(out)
    assert (rec.mechanism, rec.threshold, rec.epsilon_ceiling) == ("laplace_l2", pytest.approx(0.9), 2.0)
    assert rec.embedding_model == ("my-org/my-model" if extra[0] == "--embedding-model" else None)


def test_calibrate_takes_the_model_the_policy_declares_for_the_named_vector(tmp_path, capsys):
    vectors = np.random.default_rng(3).normal(size=(40, 4))
    client = QdrantClient(path=str(tmp_path / "store"))
    client.create_collection("docs", vectors_config={"body": models.VectorParams(size=4, distance=models.Distance.COSINE)})
    client.upsert("docs", [models.PointStruct(id=i, vector={"body": v.tolist()}) for i, v in enumerate(vectors)])
    client.close()
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps(v.tolist()) + "\n" for v in vectors[:20]))
    pol = _policy(tmp_path, '[collections.docs]\nclass = "PII"\n[collections.docs.utility]\nmax_recall_drop = 0.9\n'
                            'min_queries = 20\nembedding_model = "org/default-model"\n'
                            '[collections.docs.utility.embedding_models]\nbody = "org/body-model"\n')
    out = tmp_path / "rec.json"
    argv = [*_calibrate((tmp_path / "store", queries), out, "--epsilons", "0.5,2"), "--policy", str(pol),
            "--vector-name", "body"]
    rc, _, err = _run(argv, capsys)
    assert rc == 0, err
    rec = _record(out)
    assert (rec.vector_name, rec.embedding_model) == ("body", "org/body-model")


# -- cli_policy_keys (receipt verify --policy) ----------------------------------------------------
def test_receipt_verify_refuses_a_policy_whose_authority_key_cannot_be_read(tmp_path, store, capsys):
    # The guard refuses to start on such a policy; a check of its receipts under it must not pass.
    missing = tmp_path / "hr-authority.pub"
    pol = _policy(tmp_path, f'[boundaries.hr]\nauthority_keys = ["{missing}"]\n[collections.docs]\nclass = "PII"\n')
    rc, out, err = _run(["receipt", "verify", "--path", str(store[0]), "--collection", "docs", "--policy", str(pol)], capsys)
    assert rc == 2 and out == ""
    assert f"error: --policy: boundaries.hr.authority_keys: cannot read key file '{missing}'" in err, err


# -- cli_receipts ----------------------------------------------------------------------------------
def test_receipt_verify_names_a_collection_the_policy_refuses(tmp_path, store, capsys):
    pol = _policy(tmp_path, 'unlisted = "refuse"\n[collections.kb]\nclass = "PII"\n')
    rc, out, err = _run(["receipt", "verify", "--path", str(store[0]), "--collection", "docs", "--policy", str(pol)], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("error: --policy: collection 'docs' is not listed in the policy") and 'unlisted = "refuse"' in err, err


def test_receipt_verify_names_the_policy_of_a_key_in_two_roles(tmp_path, store, capsys):
    # The guard refuses to start with its signing key also a boundary's authority key; the check's
    # error is prefixed with the option it came from, once.
    pol = _policy(tmp_path, f'[boundaries.hr]\nauthority_keys = ["{tmp_path / "guard.key.pub"}"]\n'
                            '[collections.docs]\nclass = "PII"\n')
    from qdrant_guard import keys

    pub = keys.load_private_key(str(tmp_path / "guard.key")).public_key()
    (tmp_path / "guard.key.pub").write_text(keys.public_key_to_str(pub) + "\n")
    rc, out, err = _run(["receipt", "verify", "--path", str(store[0]), "--collection", "docs", "--policy", str(pol)], capsys)
    assert rc == 2 and out == ""
    assert err.startswith(f"error: --policy: {pol}: key {keys.key_id(pub)} is both a credential authority"), err


# A disagreeing option's message says which way the policy's value may be moved.
@pytest.mark.parametrize(("extra", "says"), [
    (["--threshold", "0.95"], "--threshold 0.95 disagrees"), (["--epsilon-ceiling", "3"], "give 2.0 or below,"),
    (["--threshold", "0.95"], "give 0.9 or below,"), (["--min-queries", "5"], "give 20 or above,"),
    (["--k", "5"], "give 10, or change the policy"),
], ids=["threshold-flag", "ceiling", "threshold", "min-queries", "k"])
def test_calibrate_policy_refusal_says_which_values_agree(tmp_path, store, capsys, extra, says):
    pol = _policy(tmp_path, '[collections.docs]\nclass = "PII"\n[collections.docs.utility]\n'
                            'max_recall_drop = 0.9\nmin_queries = 20\n')
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out, "--epsilons", "2"), "--policy", str(pol), *extra], capsys)
    assert rc == 2 and says in err and not out.exists(), err


# receipt verify's summary line: a PUBLIC collection's unreceipted vectors are not counted as
# checked; raw_in_boundary is named only when the policy sets it.
def test_receipt_verify_counts_no_vector_of_a_public_collection_as_checked(tmp_path, store, capsys):
    pol = _policy(tmp_path, '[collections.docs]\nclass = "PUBLIC"\n')
    rc, out, err = _run(["receipt", "verify", "--path", str(store[0]), "--collection", "docs", "--policy", str(pol)], capsys)
    assert rc == 0, err
    assert out.splitlines()[-1] == (f"0/0 receipted vectors verify in 'docs' (class PUBLIC in {pol}: its vectors need no "
                                    "receipt; 40 vector(s) without one not checked, the receipts present verified)")


@pytest.mark.parametrize("raw", [True, False])
def test_receipt_verify_names_raw_in_boundary_only_when_set(tmp_path, store, capsys, raw):
    from qdrant_guard import keys

    _, apk = keys.generate_keypair()
    pol = _policy(tmp_path, f'[boundaries.hr]\nauthority_keys = ["{keys.public_key_to_str(apk)}"]\n'
                            f'[collections.docs]\nclass = "PII"\nowner = "hr"\nraw_in_boundary = {str(raw).lower()}\n')
    rc, out, err = _run(["receipt", "verify", "--path", str(store[0]), "--collection", "docs", "--policy", str(pol)], capsys)
    assert rc == 1, err  # 40 vectors without a receipt
    summary = out.splitlines()[-1]
    assert summary.startswith(f"0/40 receipted vectors verify in 'docs' (class PII in {pol}: every dense vector needs a receipt")
    assert ("raw_in_boundary is on" in summary) is raw, summary


# The first query decides whether queries are texts: one query is enough, and a file that opens with
# a vector is refused as mixed before any model is named or loaded.
def test_calibrate_measures_a_single_query(tmp_path, store, capsys):
    one = tmp_path / "one.jsonl"
    one.write_text(store[1].read_text().splitlines()[0] + "\n")
    out = tmp_path / "rec.json"
    rc, _, err = _run(["calibrate", "--path", str(store[0]), "--collection", "docs", "--queries", str(one),
                       "--out", str(out), "--no-progress", "--seed", "1", "--threshold", "0.9", "--allow-few-queries"], capsys)
    assert rc == 0, err
    assert _record(out).measured_queries == 1
    assert f"warning: {out} was signed (under --allow-few-queries) on 1 query, fewer than" in err, err


def test_calibrate_refuses_vectors_then_texts_as_mixed_queries(tmp_path, store, capsys):
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(store[1].read_text().splitlines()[0] + "\n" + json.dumps("who earns most") + "\n")
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate((store[0], mixed), out), "--allow-few-queries", "--embedding-model", "other/model"], capsys)
    assert rc == 2 and "queries mixes texts and vectors" in err and "--embedding-model" not in err, err


# -- the run ---------------------------------------------------------------------------------------
def test_calibrate_exits_2_and_writes_nothing_when_no_level_is_feasible(tmp_path, store, capsys):
    out = tmp_path / "rec.json"
    rc, stdout, err = _run([*_calibrate(store, out, "--epsilons", "0.01", "--threshold", "0")], capsys)
    assert rc == 2 and stdout == "" and not out.exists()
    assert err.startswith("qdrant-guard calibrate: no noise level keeps the recall@10 drop <= 0"), err
    assert "error:" not in err, err  # nothing after the frontier (3 sent main to read the record not written)


def test_calibrate_warns_when_the_collection_holds_exactly_k_points(tmp_path, store, capsys):
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out, "--epsilons", "1,8", "--threshold", "0.9"), "--k", "40",
                       "--allow-small-collection"], capsys)
    assert rc == 0, err
    assert "warning: --collection 'docs' holds 40 point(s), no more than --k 40" in err, err


def test_calibrate_measures_the_metric_given(tmp_path, store, capsys):
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out, "--epsilons", "1,8", "--threshold", "0.9"), "--metric", "overlap"], capsys)
    assert rc == 0, err
    assert _record(out).metric == "overlap"


@pytest.mark.parametrize("scoped", [True, False], ids=["receipt_keys", "trusted_keys"])
def test_calibrate_policy_key_refusal_names_the_list_that_applies(tmp_path, store, capsys, scoped):
    from qdrant_guard import keys

    sk, _ = keys.generate_keypair()
    other = tmp_path / "other.key"
    other.write_bytes(keys.private_key_to_pem(sk))
    other.chmod(0o600)
    pol = _policy(tmp_path, '[collections.docs]\nclass = "PII"\n' + ("receipt_keys = []\n" if scoped else ""))
    out = tmp_path / "rec.json"
    rc, _, err = _run([*_calibrate(store, out, "--epsilons", "2"), "--policy", str(pol), "--key", str(other)], capsys)
    assert rc == 2 and not out.exists()
    assert ("a retired key nor in its receipt_keys;" if scoped else "a retired key nor in receipts.trusted_keys;") in err, err


# run_calibrate_cli from Python (its `get` defaults for a namespace without the CLI's flags): no
# opt-in to a small collection or to few queries, and a progress bar.
def _namespace(store: tuple[Path, Path], out: Path, **more):
    import argparse

    given = {"path": str(store[0]), "collection": "docs", "queries": str(store[1]), "out": str(out),
             "epsilons": "1,8", "threshold": 0.9, "seed": 1}
    return argparse.Namespace(**{**given, **more})


def test_run_calibrate_cli_without_the_opt_ins_refuses_a_small_collection_and_few_queries(tmp_path, store):
    from qdrant_guard.calibrate_cli import run_calibrate_cli
    from qdrant_guard.errors import GuardArgumentValueError

    out = tmp_path / "rec.json"
    with pytest.raises(GuardArgumentValueError, match="holds 40 point"):
        run_calibrate_cli(_namespace(store, out, k=40, no_progress=True))
    few = tmp_path / "few.jsonl"
    few.write_text("".join(store[1].read_text().splitlines(keepends=True)[:5]))
    with pytest.raises(GuardArgumentValueError, match="5 queries"):
        run_calibrate_cli(_namespace((store[0], few), out, no_progress=True))
    assert not out.exists()


def test_run_calibrate_cli_returns_2_when_no_level_is_feasible(tmp_path, store, capsys):
    from qdrant_guard.calibrate_cli import run_calibrate_cli

    out = tmp_path / "rec.json"
    assert run_calibrate_cli(_namespace(store, out, no_progress=True, epsilons="0.01", threshold=0.0)) == 2
    assert not out.exists()


def test_run_calibrate_cli_draws_progress_unless_told_not_to(tmp_path, store, capsys):
    from qdrant_guard.calibrate_cli import run_calibrate_cli

    assert run_calibrate_cli(_namespace(store, tmp_path / "a.json")) == 0
    assert "\rcalibrate" in capsys.readouterr().err
    assert run_calibrate_cli(_namespace(store, tmp_path / "b.json", no_progress=True)) == 0
    assert "\rcalibrate" not in capsys.readouterr().err
