"""Training pieces shared by the methods.

* ``sft``: supervised fine-tuning, the warm start before RL;
* ``policy_start``: the policy a pipeline starts from (the tiny base model and its SFT warm start);
* ``generation``: the ``generation`` config section bound to the generation factory;
* ``ranks``: which process of a multi-process run this is (no torch import).
"""
