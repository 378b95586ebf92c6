"""Multi-seed studies: every variant trained once per seed, aggregated into means, 95% t-intervals and verdicts.

* ``spec``: the ``study`` section (``StudySpec``, ``Claim``, ``Selection``) and its composition from the methods'
  declared studies;
* ``adapter``: what a method gives the harness (``StudyMethod``, ``Unit``);
* ``harness``: planning, keyed reuse of finished units, the test-split guard of selection studies, tracking;
* ``stats``: t-intervals, paired differences, verdicts, the choice of a selection study;
* ``report``: the markdown / JSON / plot report.
"""
