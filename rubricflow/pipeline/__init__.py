"""The stage framework and the run around it: what a stage is and how every entry point runs one.

* ``stage``: ``@stage``, ``StageContext``, the MLflow child run and report of each stage, signal handling;
* ``inputs``: a stage's declared inputs as one hash (the Prefect cache key of the stage tasks);
* ``commands``: the CLI commands a method declares without importing the CLI;
* ``summary``: the summary printed at the end of ``make run`` and the README's block of it;
* ``workspace``: the project's DVC workspace (one writer at a time, the opt-in pipelines);
* ``splits``: the test-split guard every stage runs under;
* ``progress``: progress reporting for long work, independent of where it runs.
"""
