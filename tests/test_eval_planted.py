"""Planted identifiers: what the inversion attack on topic-free identifiers is scored against.

The attack itself runs against the real model in tests/test_eval_reduced.py; these check that the
planted words are what the docstring says: three per text, found by the attack's tokenizer, drawn
without looking at the paragraph, left alone by redaction and replaced by generalisation.
"""
from __future__ import annotations

import numpy as np
import pytest

from qdrant_guard.detect import redact
from qdrant_guard.evaluation.attacks import BowVocab
from qdrant_guard.evaluation.corpus import load_paragraphs, tokenize
from qdrant_guard.evaluation.planted import SURNAMES, plant_identifiers
from qdrant_guard.identifiers import generalize_identifiers

PARAGRAPHS = load_paragraphs(200)


def _planted(paragraphs=PARAGRAPHS, seed=3, pool=12):
    return plant_identifiers(paragraphs, np.random.default_rng(seed), pool=pool)


def test_each_text_carries_its_three_words_and_the_labels_find_exactly_them():
    p = _planted()
    assert len(p.words) == len(set(p.words)) == 36
    assert p.kinds.count("number") == p.kinds.count("code") == p.kinds.count("name") == 12
    vocab = BowVocab(p.words, np.ones(36, bool), np.zeros(36, bool))
    y = vocab.labels(p.texts)
    assert (y.sum(axis=1) == 3).all()
    for row, words, text in zip(y, p.planted, p.texts):
        assert {p.words[j] for j in np.flatnonzero(row)} == set(words)
        assert set(words) <= set(tokenize(text.rsplit(". ", 1)[-1]))


def test_no_planted_name_occurs_in_the_corpus():
    words = {w for text in load_paragraphs() for w in tokenize(text)}
    assert not words & {s.lower() for s in SURNAMES}


def test_the_draws_do_not_depend_on_the_paragraph():
    other = [p[::-1] for p in PARAGRAPHS]
    assert _planted().planted == _planted(other).planted
    assert _planted().planted != _planted(seed=4).planted


def test_every_identifier_is_used_and_none_dominates():
    p = _planted(load_paragraphs(), pool=20)
    counts = {w: 0 for w in p.words}
    for words in p.planted:
        for w in words:
            counts[w] += 1
    expected = len(p.planted) / 20
    assert min(counts.values()) > 0.4 * expected and max(counts.values()) < 1.8 * expected


def test_redaction_keeps_them_and_generalisation_replaces_them():
    p = _planted()
    for text, words in zip(p.texts[:50], p.planted[:50]):
        assert set(words) <= set(tokenize(redact(text)))
        assert not set(words) & set(tokenize(generalize_identifiers(redact(text))))


@pytest.mark.parametrize("pool", [1, len(SURNAMES) + 1])
def test_pool_size_is_checked(pool):
    with pytest.raises(ValueError, match="pool must be between 2 and"):
        _planted(pool=pool)
