"""Reduced `qdrant-guard eval`: the real model on real text, asserting the privacy/utility targets.

Needs the evaluation model (scripts/install_eval_deps.sh). Without it the test skips locally and
FAILS under CI=true, where the CI installs it.
"""
from __future__ import annotations

import json
import os

import pytest

from qdrant_guard.evaluation.embed import model_available

pytestmark = pytest.mark.eval


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    if not model_available():
        message = "evaluation model not installed: run scripts/install_eval_deps.sh"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from qdrant_guard.detect import redact
    from qdrant_guard.evaluation import REDUCED
    from qdrant_guard.evaluation.embed import Embedder
    from qdrant_guard.evaluation.report import write_report
    from qdrant_guard.evaluation.sweep import EvalConfig, run_sweep

    cfg = EvalConfig(seed=1, progress=False, **REDUCED)
    embedder = Embedder()
    try:
        results = run_sweep(cfg, embedder.encode, redact)
    finally:
        embedder.close()
    out = tmp_path_factory.mktemp("eval")
    write_report(results, out, command="pytest reduced eval")
    return results, out


def _row(results, *, policy_default, redaction):
    (row,) = [
        r for r in results["levels"]
        if r["policy_default"] == policy_default and r["redaction"] == redaction
    ]
    return row


def test_the_attacks_are_real_on_clean_unredacted_vectors(reduced):
    results, _ = reduced
    clean = _row(results, policy_default=False, redaction=False)
    assert clean["sigma"] == 0.0
    # Without noise and without redaction the planted secret is recovered far above chance...
    assert clean["secret"]["all"]["top1"] >= 0.5
    # ...the bag-of-words probe beats the prior on topic words...
    assert clean["bow_naive"]["topic"]["advantage"] >= 0.1
    # ...and on planted identifiers, which the topic says nothing about...
    assert clean["planted"]["adaptive"]["advantage"] >= 0.3
    # ...and every paragraph is re-identified from its own embedding.
    assert clean["reid"]["top1"] >= 0.99
    assert results["clean"]["recall"] >= 0.8


def test_targets_hold_at_the_default_policy_with_redaction(reduced):
    from qdrant_guard.evaluation.report import check_targets

    results, _ = reduced
    assert results["detector"]["redacted"] == results["detector"]["planted"]
    targets = check_targets(results)
    row = _row(results, policy_default=True, redaction=True)
    assert targets["secret_x_chance"]["ok"], row["secret"]
    assert targets["recall_ratio"]["ok"], row["utility"]


def test_planted_identifiers_are_hidden_at_the_default_policy_only_with_generalisation(reduced):
    from qdrant_guard.evaluation.report import check_targets

    results, _ = reduced
    assert results["config"]["generalize_identifiers"] is True
    row = _row(results, policy_default=True, redaction=True)
    assert check_targets(results)["planted_identifier_adaptive_advantage"]["ok"], row["planted"]
    # The default noise alone does not hide them: detect.redact leaves them in the text, and the
    # unredacted rows show what the noise does by itself.
    noise_only = _row(results, policy_default=True, redaction=False)
    assert noise_only["planted"]["adaptive"]["advantage_ci"][0] > 0.1, noise_only["planted"]


@pytest.mark.xfail(strict=True, reason=(
    "known gap (issue 5): the corpus's own identifiers (code names such as __getitem__, TypeError) "
    "travel with their topics; the full run measures +0.069 at the default policy, +0.147 with "
    "identifiers generalised and no noise at all. Met means the whole 95 % interval is within "
    "0.05 (+0.041 here on 2026-12-04, interval up to +0.128). Strict: when the target is met this test fails, "
    "so the gap cannot close silently."))
def test_identifier_target_at_the_default_policy_with_redaction(reduced):
    from qdrant_guard.evaluation.report import check_targets

    results, _ = reduced
    row = _row(results, policy_default=True, redaction=True)
    assert check_targets(results)["identifier_adaptive_advantage"]["ok"], row["bow_adaptive"]


def test_report_and_plot_are_written(reduced):
    results, out = reduced
    text = (out / "report.md").read_text()
    assert "## Targets" in text and "Recommended operating point" in text
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "results.json").read_text())["config"]["n_docs"] == results["config"]["n_docs"]


def test_recall_is_measured_over_independent_noise_draws(reduced):
    from qdrant_guard.evaluation.report import check_targets

    results, out = reduced
    row = _row(results, policy_default=True, redaction=True)
    draws = row["utility"]["recall_ratio_draws"]
    assert len(draws) == results["config"]["utility_draws"] == 20
    assert check_targets(results)["recall_ratio"]["value"] == row["utility"]["recall_ratio_mean"]
    assert "independent noise draws at the policy default" in (out / "report.md").read_text()
