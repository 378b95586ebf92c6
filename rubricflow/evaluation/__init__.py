"""Held-out evaluation of a policy and the checkers it scores with.

* ``heldout``: greedy accuracy, and the sampled readouts RL moves first (sampled accuracy, pass@k, clean pass@k);
* ``answers``: outcome correctness (is the boxed answer the reference answer?);
* ``trace_check``: the strict full-trace verifier against every ground-truth fact, independent of any judge.
"""
