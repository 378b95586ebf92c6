"""The SFT learning-rate schedule (rubricflow.sft.lr_factor), by hand."""

import math

import pytest

from rubricflow.sft import lr_factor


def test_warmup_then_constant():
    assert [lr_factor(s, 10, 4) for s in range(6)] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    assert lr_factor(9, 10, 0) == 1.0  # no warmup: 1 throughout


def test_warmup_then_cosine_to_zero_at_the_last_step():
    steps, warm = 10, 2
    f = [lr_factor(s, steps, warm, "cosine") for s in range(steps)]
    assert f[:2] == pytest.approx([0.5, 1.0])  # warmup (step 1 is the last warmup step)
    # after warmup: 0.5 * (1 + cos(pi * (s - 2) / 8)) for s = 2..9
    assert f[2] == pytest.approx(1.0)  # the first step after warmup runs at the peak
    assert f[6] == pytest.approx(0.5)  # halfway through the decay
    assert f[9] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))  # 0.03806: the last step, just above 0
    assert lr_factor(10, steps, warm, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(f[1:], f[2:]))  # monotone after warmup
    with pytest.raises(ValueError, match="'linear'"):
        lr_factor(0, 10, 2, "linear")
