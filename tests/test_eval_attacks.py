"""The evaluation's measuring sticks: word classes, micro-F1, the bootstrap interval, the query-noise knob.

The attacks themselves run against the real model in tests/test_eval_reduced.py; these check the
arithmetic they are scored with, on inputs whose answers are worked out by hand.
"""
from __future__ import annotations

import numpy as np
import pytest

from qdrant_guard.evaluation.attacks import advantage_interval, micro_f1_topk
from qdrant_guard.evaluation.corpus import is_identifier_token, is_topic_token, tokenize


@pytest.mark.parametrize("token", ["__getitem__", "format_spec", "_", "str.format", "sys.path", "3.7", "1", "utf-8", "2.x"])
def test_numbers_and_code_names_are_identifiers(token):
    assert is_identifier_token(token)
    assert not is_topic_token(token)


@pytest.mark.parametrize("token", ["built-in", "read-only", "user-defined", "iterator", "comma-separated"])
def test_words_and_hyphenated_compounds_are_topic_words(token):
    assert is_topic_token(token)
    assert not is_identifier_token(token)


@pytest.mark.parametrize("token", ["e.g", "i.e", "the", "int", "def", "with"])
def test_abbreviations_stopwords_and_short_words_are_neither(token):
    assert not is_identifier_token(token)
    assert not is_topic_token(token)


def test_tokenize_keeps_code_names_whole():
    assert tokenize("Call obj.__getitem__(3.7), e.g. built-in") == ["call", "obj.__getitem__", "3.7", "e.g", "built-in"]


def test_micro_f1_by_hand():
    truth = np.array([[1, 0, 1, 0], [0, 1, 0, 0]], dtype=float)
    scores = np.array([[0.9, 0.1, 0.2, 0.0], [0.0, 0.8, 0.7, 0.1]])
    # k=2 predicts {0, 2} (2 tp) and {1, 2} (1 tp, 1 fp): tp 3, fp 1, fn 0 -> 6 / 7.
    assert micro_f1_topk(scores, truth, 2) == pytest.approx(6 / 7)
    # k=1 predicts {0} and {1}: tp 2, fp 0, fn 1 -> 4 / 5.
    assert micro_f1_topk(scores, truth, 1) == pytest.approx(4 / 5)
    assert micro_f1_topk(scores, truth, 0) == 0.0


def test_interval_of_no_advantage_is_zero():
    rng = np.random.default_rng(3)
    truth = (rng.random((50, 6)) < 0.3).astype(float)
    scores = rng.random((50, 6))
    assert advantage_interval(scores, scores, truth, 2, 2) == (0.0, 0.0)


def test_interval_of_a_perfect_attacker_is_positive_and_holds_the_estimate():
    rng = np.random.default_rng(4)
    truth = np.zeros((80, 10))
    truth[np.arange(80), rng.integers(0, 10, 80)] = 1.0
    prior = np.broadcast_to(truth.mean(axis=0), truth.shape).copy()
    point = micro_f1_topk(truth, truth, 1) - micro_f1_topk(prior, truth, 1)
    lo, hi = advantage_interval(truth, prior, truth, 1, 1)
    assert 0.0 < lo <= point <= hi <= 1.0
    # Deterministic: the resampling seed is fixed.
    assert advantage_interval(truth, prior, truth, 1, 1) == (lo, hi)


@pytest.mark.parametrize("noise_queries", [False, True])
def test_query_noise_knob_reaches_the_sweep_and_the_report(tmp_path, noise_queries):
    from qdrant_guard.detect import redact
    from qdrant_guard.evaluation.report import write_report
    from qdrant_guard.evaluation.sweep import EvalConfig, run_sweep
    from qdrant_guard.hashing_embedder import HashingEmbedder

    hashing = HashingEmbedder(64)

    def embed(texts, progress=False, desc=""):
        return hashing(list(texts))

    cfg = EvalConfig(seed=0, sigmas=(0.0, 0.5), max_docs=80, n_queries=20, carriers_per_kind=1,
                     n_candidates=20, progress=False, noise_queries=noise_queries)
    results = run_sweep(cfg, embed, redact)
    assert results["config"]["noise_queries"] is noise_queries
    text = write_report(results, tmp_path, command="test").read_text()
    assert ("documents and queries" in text) is noise_queries
    assert ("documents only" in text) is not noise_queries
    ident = results["levels"][0]["bow_adaptive"]["identifier"]
    lo, hi = ident["advantage_ci"]
    assert lo <= ident["advantage"] <= hi
    lo, hi = ident["over_reference_ci"]
    assert lo <= ident["over_reference"] <= hi
    assert "ident over topic-only" in text and "against the topic-only reference" in text


def test_case_reveals_codes_and_rare_proper_tokens():
    from qdrant_guard.evaluation.corpus import identifiers_by_case

    common = ["the parser reads the Python source and the Python grammar"] * 30
    texts = common + [
        "a call that fails raises TypeError when the operand is wrong",
        "the codec maps text to Unicode code points",
        "ASCII is a seven-bit encoding; see ASCII tables",
    ]
    found = identifiers_by_case(texts, rare_fraction=0.05)
    # Codes: an upper-case letter after the first, in most occurrences.
    assert {"typeerror", "ascii"} <= found
    # A proper token in one text of 33 is rare; 'python', capitalised in every text, is the subject.
    assert "unicode" in found
    assert "python" not in found
    # Sentence-initial capitals and ordinary words are not evidence.
    assert not {"a", "the", "parser", "codec", "raises"} & found


def _results(adv, interval, secret=1.0, ratio=0.97):
    row = {"policy_default": True, "redaction": True, "secret": {"all": {"x_chance": secret}},
           "bow_adaptive": {"identifier": {"advantage": adv, "advantage_ci": interval}},
           "utility": {"recall_ratio": ratio}}
    return {"levels": [row]}


def test_the_identifier_target_needs_its_whole_interval_within_the_limit():
    from qdrant_guard.evaluation.report import check_targets

    assert check_targets(_results(0.03, (0.01, 0.049)))["identifier_adaptive_advantage"]["ok"]
    assert not check_targets(_results(0.03, (-0.04, 0.11)))["identifier_adaptive_advantage"]["ok"]
    assert not check_targets(_results(0.06, (0.04, 0.049)))["identifier_adaptive_advantage"]["ok"]


@pytest.mark.parametrize("generalize", [True, False])
def test_generalisation_knob_changes_what_is_embedded_and_is_reported(tmp_path, generalize):
    from qdrant_guard.detect import redact
    from qdrant_guard.evaluation.report import write_report
    from qdrant_guard.evaluation.sweep import EvalConfig, run_sweep
    from qdrant_guard.hashing_embedder import HashingEmbedder

    hashing = HashingEmbedder(64)
    seen: list[str] = []

    def embed(texts, progress=False, desc=""):
        seen.extend(texts)
        return hashing(list(texts))

    cfg = EvalConfig(seed=0, sigmas=(0.0,), max_docs=40, n_queries=10, carriers_per_kind=1,
                     n_candidates=10, progress=False, generalize_identifiers=generalize)
    results = run_sweep(cfg, embed, redact)
    assert results["config"]["generalize_identifiers"] is generalize
    assert any("[CODE]" in t for t in seen) is generalize
    text = write_report(results, tmp_path, command="test").read_text()
    assert ("identifiers generalised" in text) is generalize


def test_a_reference_attacker_is_compared_like_the_prior():
    from qdrant_guard.evaluation.attacks import BowVocab, bow_inversion, probe_scores

    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 8))
    y = (x[:, :4] > 0.5).astype(np.float64)
    vocab = BowVocab(("a", "b", "c", "d"), np.array([True, True, False, False]), np.array([False, False, True, True]))
    tr, te = slice(0, 80), slice(80, None)
    own, _ = probe_scores(x[tr], y[tr], x[te])
    same = bow_inversion(x[tr], y[tr], x[te], y[te], vocab, reference=own)
    for cls in ("identifier", "topic"):
        assert same[cls]["over_reference"] == 0.0
        assert same[cls]["over_reference_ci"] == (0.0, 0.0)
    # A reference that reads nothing (constant scores) is beaten by the informed probe.
    blind = bow_inversion(x[tr], y[tr], x[te], y[te], vocab, reference=np.zeros((40, 4)))
    assert blind["identifier"]["over_reference_ci"][0] > 0.0
    assert "over_reference" not in bow_inversion(x[tr], y[tr], x[te], y[te], vocab)["identifier"]


def _draw_results(draw0, draws):
    row = _results(0.0, (0.0, 0.0), ratio=draw0)["levels"][0]
    row["utility"].update(recall_ratio_draws=[draw0, *draws],
                          recall_ratio_mean=float(np.mean([draw0, *draws])))
    return {"levels": [row]}


def test_the_recall_target_is_judged_on_the_mean_of_the_noise_draws():
    from qdrant_guard.evaluation.report import check_targets, recall_ratio

    # One draw is one sample of the keyed noise: a low draw 0 with a mean above the limit meets
    # the target, a lucky draw 0 with a mean under it does not, and the spread is reported.
    low_first = check_targets(_draw_results(0.946, [0.96, 0.97, 0.965]))["recall_ratio"]
    assert low_first["ok"] and low_first["value"] == pytest.approx(0.96025)
    assert low_first["draws"] == {"n": 4, "min": 0.946, "max": 0.97, "below": 1}
    lucky_first = check_targets(_draw_results(0.966, [0.94, 0.93, 0.945]))["recall_ratio"]
    assert not lucky_first["ok"] and lucky_first["draws"]["below"] == 3
    # Results written before draws existed keep their single value.
    assert recall_ratio(_results(0.0, (0.0, 0.0), ratio=0.955)["levels"][0]) == 0.955


def test_utility_draws_are_independent_keys_and_draw_zero_is_the_attacks_draw(tmp_path):
    from qdrant_guard.detect import redact
    from qdrant_guard.evaluation.report import write_report
    from qdrant_guard.evaluation.sweep import EvalConfig, run_sweep
    from qdrant_guard.hashing_embedder import HashingEmbedder

    hashing = HashingEmbedder(64)

    def embed(texts, progress=False, desc=""):
        return hashing(list(texts))

    base = dict(seed=0, sigmas=(0.0, 0.3), max_docs=60, n_queries=30, carriers_per_kind=1,
                n_candidates=10, progress=False)
    one = run_sweep(EvalConfig(utility_draws=1, **base), embed, redact)
    many = run_sweep(EvalConfig(utility_draws=6, **base), embed, redact)
    for a, b in zip(one["levels"], many["levels"]):
        # Draw 0 is unchanged by adding draws, and so is everything the attacks measured.
        assert a["utility"]["recall_ratio"] == b["utility"]["recall_ratio"]
        assert a["reid"] == b["reid"] and a["secret"] == b["secret"]
        draws = b["utility"]["recall_ratio_draws"]
        assert draws[0] == b["utility"]["recall_ratio"]
        assert b["utility"]["recall_ratio_mean"] == pytest.approx(np.mean(draws))
        assert len(draws) == (1 if a["epsilon"] is None else 6)
    noised = [b for b in many["levels"] if b["epsilon"] is not None]
    # sigma 0.3 on 64-d hashing vectors moves the top-10: independent keys give different recalls.
    assert any(len(set(b["utility"]["recall_ratio_draws"])) > 1 for b in noised)
    text = write_report(many, tmp_path, command="test").read_text()
    assert "independent noise draws at the policy default" in text
    with pytest.raises(ValueError, match="utility_draws"):
        run_sweep(EvalConfig(utility_draws=0, **base), embed, redact)


def test_eval_cli_refuses_zero_utility_draws(capsys):
    from qdrant_guard.evaluation import run_eval_cli

    assert run_eval_cli(["--utility-draws", "0", "--no-progress"]) == 2
    assert "--utility-draws must be >= 1" in capsys.readouterr().err


def test_a_level_is_recommended_only_if_nine_draws_in_ten_keep_recall():
    from qdrant_guard.evaluation.report import recommend

    def results(draws):
        row = {"policy_default": True, "redaction": True, "epsilon": 0.5, "sigma": 0.05, "scale": 0.05,
               "secret": {"all": {"x_chance": 1.0}},
               "utility": {"recall_ratio": draws[0], "recall_ratio_draws": draws,
                           "recall_ratio_mean": float(np.mean(draws))}}
        return {"levels": [row], "config": {"policy": {"radius": 0.01}}}

    # Mean 0.9525 but 2 of 4 draws under 0.95: half the collections would miss the target.
    assert "no measured level" in recommend(results([0.94, 0.945, 0.96, 0.965]))["PII"]
    kept = recommend(results([0.951] * 9 + [0.949]))["PII"]
    assert "epsilon 0.5" in kept and "mean of 10 noise draws, 1 under 95%" in kept
