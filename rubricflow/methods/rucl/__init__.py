"""RuCL (stratified rubric-based curriculum learning): config, the Phase II training stage (rubricflow.methods.rucl.train).

The reward and the curriculum are method-agnostic modules (rubricflow.methods.rucl.rewards, rubricflow.methods.rucl.curriculum); this package
wires them to rollouts, the judge and the GRPO engine.
"""

