"""RoRo: rubric-guided process reward for stepwise model routing (pipeline: rubricflow/methods/roro/pipeline.py).

``rubricflow.methods.roro.process_score(rubric, judgments)`` is the Judge's process score (sum weight * score * satisfied;
``score_judgments`` also lists the criteria with no judgment). Both are loaded lazily so that importing the config
(``rubricflow.methods.roro.config``, composed into ``rubricflow.config.Config``) stays cheap.
"""


__all__ = ["process_score", "score_judgments"]


def __getattr__(name: str):
    if name in __all__:
        from rubricflow.methods.roro import rubric

        return getattr(rubric, name)
    raise AttributeError(f"module 'rubricflow.methods.roro' has no attribute {name!r}")
