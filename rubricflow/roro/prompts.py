"""What the Rubricor and the Judge read, and the templated warm-start targets.

Rubricor input: the problem and a label-free view of its trajectory pool (the SLM's uncertainty at each step of
the all-SLM route, one digit each: what makes a rubric query-specific without revealing outcomes)::

    Write a routing rubric.
    Problem: Start with 7. Add 5. Multiply by 2.
    SLM uncertainty: 1 7 0

Judge input: the problem, the rubric's criteria, and the trajectory in text: each step with who wrote it and the
SLM's uncertainty at that step (one digit, 0-9), never the ground truth::

    Judge the routing.
    Problem: Start with 7. Add 5. Multiply by 2.
    Rubric:
    - LRM at step 2
    - at most 1 LRM steps
    Steps:
    1 SLM u=1: 7 + 5 = 12
    2 LRM u=7: 12 * 2 = 24
    3 SLM u=0: #### 24

Criterion templates (every one decidable from what the Judge sees) seed the round-0 warm start, where both roles
learn the output *format* with deliberately uninformative content: random criteria and weights for the Rubricor,
random ``satisfied`` / ``score`` for the Judge, so the alternation has room to learn.
"""

from __future__ import annotations

import random

from rubricflow.roro.env import Trajectory

RUBRICOR_TASK = "Write a routing rubric."
JUDGE_TASK = "Judge the routing."

# (criterion, score_guidance); {k} a step number, {d} an uncertainty digit, {m} a number of LRM steps
TEMPLATES = (
    ("LRM at step {k}", "1.0 if step {k} is by the LRM"),
    ("LRM when u above {d}", "1.0 if no SLM step has u above {d}"),
    ("SLM when u below {d}", "1.0 if no LRM step has u below {d}"),
    ("at most {m} LRM steps", "1.0 if met"),
    ("every step is right", "1.0 if all steps are right"),
)


def u_digit(u: float) -> int:
    """Uncertainty in [0, 1] as one digit 0-9 (tenths, floored)."""
    return max(0, min(9, int(u * 10)))


def rubricor_input(question: str, slm_uncertainties: list[float]) -> str:
    us = " ".join(str(u_digit(u)) for u in slm_uncertainties)
    return f"{RUBRICOR_TASK}\nProblem: {question}\nSLM uncertainty: {us}"


def trajectory_text(t: Trajectory) -> str:
    return "\n".join(f"{s.index + 1} {s.writer} u={u_digit(s.slm_uncertainty)}: {s.text}" for s in t.steps)


def judge_input(question: str, rubric: list[dict], t: Trajectory) -> str:
    crit = "\n".join(f"- {c['criterion']}" for c in rubric)
    return f"{JUDGE_TASK}\nProblem: {question}\nRubric:\n{crit}\nSteps:\n{trajectory_text(t)}"


def chat(tokenizer, content: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)


# ----------------------------------------------------------------------------------------------------------------
# Warm-start templates


def random_rubric(rng: random.Random, n_steps: int, min_criteria: int, max_criteria: int) -> list[dict]:
    """Random criteria from TEMPLATES with random parameters and weights (uninformative by construction)."""
    n = rng.randint(min_criteria, min(max_criteria, len(TEMPLATES)))
    out = []
    for crit, guide in rng.sample(TEMPLATES, n):
        params = {"k": rng.randint(1, max(1, n_steps)), "d": rng.randint(1, 8), "m": rng.randint(0, 2)}
        out.append({"criterion": crit.format(**params), "score_guidance": guide.format(**params),
                    "weight": rng.randint(2, 8) / 10})
    return out


def random_judgments(rng: random.Random, rubric: list[dict]) -> list[dict]:
    """Random ``satisfied`` and ``score`` per criterion (uninformative by construction)."""
    return [{"criterion": c["criterion"], "score": rng.choice([0.5, 1.0]), "satisfied": rng.random() < 0.5}
            for c in rubric]
