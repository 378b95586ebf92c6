"""RuCL (stratified rubric-based curriculum learning): config, the Phase II training stage (rubricflow.rucl.train).

The reward and the curriculum are method-agnostic modules (rubricflow.rewards, rubricflow.curriculum); this package
wires them to rollouts, the judge and the GRPO engine.
"""

