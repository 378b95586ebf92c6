"""The stop-token contract of every backend (models.generation.contract)."""

from models.generation.contract import trim_at_stop


def test_trim_at_stop_drops_the_stop_token_and_everything_after_it():
    eos, pad = 2, 0
    assert trim_at_stop([5, 6, 2], [-1.0, -2.0, -3.0], eos, pad) == ([5, 6], [-1.0, -2.0], True)
    assert trim_at_stop([5, 0, 0], None, eos, pad) == ([5], None, False)  # a pad token ends it, unfinished
    assert trim_at_stop([5, 6, 7], [-1.0, -1.0, -1.0], eos, pad) == ([5, 6, 7], [-1.0, -1.0, -1.0], False)
    assert trim_at_stop([2, 5], None, eos, pad) == ([], None, True)

