"""One naming convention for the metrics rubricflow logs to MLflow: every name starts with one namespace.

| namespace | what |
|---|---|
| ``train/`` | the training loop: per-step rewards, losses, advantages, rollout and update numbers, end-of-run training summaries |
| ``val/`` | numbers measured on the validation split (accuracy before and after training, evaluations during training) |
| ``test/`` | numbers measured on the test split (the final evaluation stages) |
| ``judge/`` | the judge: failed, repaired and missing judgments, judge time and tokens, rewards left missing |
| ``curriculum/`` | RuCL's curriculum: lambda, the batch score it reads, the switch |
| ``stage/`` | bookkeeping of a stage run: its duration, counts of what it wrote |

MLflow's chart view groups metrics by the part before the first ``/``, so each namespace is one section.

Per-step metrics (``StageRun.log_metrics(m, step=...)``) are named by :func:`step_names`: a name already in a
namespace stays, evaluations during training (``eval/...``) go to ``val/``, missing rewards are counted once as
``judge/missing_rewards`` (the updater's ``n_missing``; the scorer's ``reward/n_missing`` and a single role's
``n_missing/<role>`` are the same count and are dropped), RuCL's ``outcome_accuracy`` (a copy of ``reward/outcome``) is
dropped, and every other name goes under ``train/``. A stage's end-of-run metrics are named by :func:`stage_names`
with the stage's namespace and renames (``@stage(metric_ns=..., metric_names=...)``). The stage reports
(``reports/<stage>.json``, DVC metrics) keep their own keys; only the MLflow names follow this convention.
"""  # noqa: E501 (the namespace table above is markdown: a table row cannot be wrapped)

from __future__ import annotations

from collections.abc import Mapping

NAMESPACES = ("train", "val", "test", "judge", "curriculum", "stage")
BOOKKEEPING = ("duration_s",)  # end-of-run names of every stage that go under stage/


def in_namespace(name: str) -> bool:
    """Whether ``name`` already starts with one of :data:`NAMESPACES`."""
    return name.split("/", 1)[0] in NAMESPACES


def _roles(metrics: Mapping[str, float]) -> set[str]:
    return {k.split("/", 1)[1] for k in metrics if k.startswith("n_episodes/")}


def step_names(metrics: Mapping[str, float]) -> dict[str, float]:
    """Per-step metrics of a training loop under the convention (see the module docstring)."""
    roles = _roles(metrics)
    out: dict[str, float] = {}
    for k, v in metrics.items():
        head, _, rest = k.partition("/")
        if k == "n_missing" or (k == "reward/n_missing" and "n_missing" not in metrics):
            name = "judge/missing_rewards"
        elif k == "reward/n_missing" or (k == "outcome_accuracy" and "reward/outcome" in metrics):
            continue  # the same count / value under another name
        elif head == "n_missing" and rest:
            if len(roles) <= 1:
                continue  # one role: the same as n_missing
            name = f"judge/missing_rewards/{rest}"
        elif in_namespace(k):
            name = k
        elif head == "eval" and rest:
            name = f"val/{rest}"
        else:
            name = f"train/{k}"
        out[name] = v
    return out


def stage_names(metrics: Mapping[str, float], ns: str = "stage",
                renames: Mapping[str, str | None] | None = None) -> dict[str, float]:
    """A stage's flat end-of-run metrics under the convention: ``renames`` first (a key, or a prefix ending in
    ``/``, mapped to its new name or prefix; None drops it), then a name already in a namespace stays, a
    :data:`BOOKKEEPING` name goes under ``stage/``, and every other under ``ns``."""
    if ns not in NAMESPACES:
        raise ValueError(f"metric namespace {ns!r}: expected one of {', '.join(NAMESPACES)}")
    renames = renames or {}
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if k in renames:
            name = renames[k]
        else:
            prefix = next((p for p in renames if p.endswith("/") and k.startswith(p)), None)
            if prefix is not None:
                new = renames[prefix]
                name = None if new is None else new + k[len(prefix):]
            elif in_namespace(k):
                name = k
            elif k in BOOKKEEPING:
                name = f"stage/{k}"
            else:
                name = f"{ns}/{k}"
        if name is None:
            continue
        if not in_namespace(name):
            raise ValueError(f"metric {k!r} renamed to {name!r}, which is in none of {', '.join(NAMESPACES)}")
        out[name] = v
    return out
