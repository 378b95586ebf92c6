"""RoRo's studies: the study adapters and default studies the harness (``rubricflow study``) runs.

``specs`` (the routing studies ``roro``, ``roro_parity`` and ``roro_router_tune``: every routing method once per
seed; their adapter and unit function), ``report`` (their report beyond the harness's tables: the Judge per
alternation phase, the curves with bands over seeds), ``judge_tune`` (the selection study ``roro_judge_tune`` of the
Judge's size and warm start, on val) and ``judge_dose`` (the Judge-quality dose-response ``roro_judge_dose``).
"""
