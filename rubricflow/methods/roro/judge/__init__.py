"""RoRo's rubrics, the Rubricor that writes them and the Judge that reads them: the process score of a route.

``rubric`` (rubrics and judgments in the paper's shapes, the process score, tolerant parsing), ``prompts`` (what
the Rubricor and the Judge read, and the templated warm-start targets), ``lm`` (the tiny LM that acts as the
Rubricor or the Judge), ``rubricor`` (the Rubricor's side: problem views, rubrics and their storage), ``scoring``
(the Judge's side: judgments and the process scores read from them), ``pairs`` (preference pairs between routes of
one problem: outcome, then cost, then process), ``pairwise`` (pairwise accuracy of process scores on those pairs) and
``alternation`` (the warm start and the alternating Rubricor-Judge optimisation, the ``roro_rubricor_judge`` stage).
"""
