"""RoRo's routing environment: the problems, the two step models and the stepwise routing over them.

``task`` (checkable multi-step arithmetic problems and the GSM8K-style adapter), ``problems`` (the problem set of
each split and the test-split guard), ``step_lm`` (the LM that writes the next step of a solution, with the token
statistics the router reads), ``step_models`` (the SLM and the LRM: training, loading, ``make_env``), ``routing``
(the environment: SLM proposes, the router keeps it or calls the LRM; trajectories, policies, the step cache),
``trajectories`` (every route of each train / val problem, stored) and ``oracles`` (process scores of known quality:
the exact oracle, the noisy oracle, the exact reader of a Rubricor's rubrics).
"""
