"""RoRo's router: its state, its network, its GRPO training and the accuracy-vs-cost evaluation.

``features`` (the router's 5-dimensional state), ``mlp`` (the router network, ``RouterMLP``, and its files),
``train`` (router GRPO over the cost-weight sweep, the ``roro_router`` stage: rollouts, rewards, runs), ``evaluate``
(accuracy vs LRM cost on held-out problems for routers and baselines, the ``roro_eval`` stage) and ``curves`` (the
curves as numbers: hulls, areas, matched and range accuracy, the val choice of cost weights).
"""
