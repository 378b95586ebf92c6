"""RuCL (stratified rubric-based curriculum learning): config, the Phase II training stage (rubricflow.rucl.train).

The reward and the curriculum are method-agnostic modules (rubricflow.rewards, rubricflow.curriculum); this package
wires them to rollouts, the judge and the GRPO engine.
"""

# rubricflow.config composes the method sections (rucl.grpo holds a GRPOConfig) when first imported; importing it
# before our own config module keeps that order whichever module a caller imports first.
import rubricflow.config  # noqa: F401,I001
