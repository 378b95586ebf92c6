"""Judge errors that stop a stage (as opposed to a per-sample failed Judgment, which is *missing*).

* ``JudgeConfigError`` (a ValueError: a retry cannot fix it): the section cannot be turned into a working judge,
  or the server rejects it at preflight (401/403 bad key, 404 unknown model or URL, 400/422 bad request).
* ``JudgeUnavailable`` (a RuntimeError: the Prefect task retries it): the preflight call found no usable server
  (closed port, timeout, 5xx, garbage body).
* ``JudgeFailureBudgetExceeded`` (a RuntimeError): more than ``judge.max_failed_frac`` of the judgments failed;
  the message has the counts and the most frequent reasons.
* ``JudgeDeadlineExceeded`` (a RuntimeError): the stage spent ``judge.stage_deadline_s`` judging.
"""

from __future__ import annotations


class JudgeConfigError(ValueError):
    """The judge section cannot be turned into a working backend (names the key, never a secret)."""


class JudgeError(RuntimeError):
    """A judge problem that ends the stage (a retry of the stage may succeed)."""


class JudgeUnavailable(JudgeError):
    """The preflight call got no usable answer from the judge server."""


class JudgeFailureBudgetExceeded(JudgeError):
    """Too many judgments failed: the stage must not go on with them (or write outputs from them)."""


class JudgeDeadlineExceeded(JudgeError):
    """The stage's judge calls took longer than ``judge.stage_deadline_s`` in all (the rest was cancelled)."""
