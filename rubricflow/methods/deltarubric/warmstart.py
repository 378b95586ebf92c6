"""SFT warm start for the shared policy: templated plans and verdicts built from ground-truth facts.

Per training pair (rubricflow.methods.deltarubric.targets):

* planner:    planner prompt -> the reference checklist (neutral checks on the claims where A and B disagree);
* verifier:   verifier prompt with the reference checklist -> per-check evidence + the correct verdict, plus
              ``verifier_variants`` examples with a shuffled / extended checklist (so the verifier executes any
              neutral checklist, including the planner's imperfect ones during RL);
* no_rubric:  no-rubric prompt -> ``verdict: X``;
* static:     static-rubric prompt -> per-criterion preference + verdict.

Perception (``perception_images`` per task, ``read_examples``): images rendered in memory by the synthetic
generators under their own split name (``"perception"``, so never a train/val/test image), each with the read
prompt (question + image) and the worked trace of its ground truth as the target: the verifier's first line. With
``perception_steps > 0`` they are a first phase of their own (short sequences, so many images for little time),
before the role examples; with 0 they are mixed into them. A verifier that cannot read its image has nothing for a
checklist to guide.

The baselines get examples too: the tiny model has no instruction following of its own, and the comparison
between judge modes is only fair when every mode's output format was taught equally.
"""

from __future__ import annotations

import random

from rubricflow.data.pairs import PreferencePair
from rubricflow.methods.deltarubric.roles import NO_RUBRIC, PLANNER, STATIC, VERIFIER
from rubricflow.methods.deltarubric.rollout import Item, chat, request
from rubricflow.methods.deltarubric.config import DRSFTConfig
from rubricflow.methods.deltarubric.prompts import read_prompt
from rubricflow.methods.deltarubric.targets import (
    no_rubric_target,
    planner_target,
    reference_checks,
    static_target,
    variant_checks,
    verifier_target,
    worked_reading,
)
from rubricflow.sft import SFTExample


def role_texts(pair: PreferencePair, cfg: DRSFTConfig, rng: random.Random) -> list[tuple[str, list[str] | None, str]]:
    """``(role name, checklist or None, target)`` for every example of one pair."""
    checks = reference_checks(pair)
    out: list[tuple[str, list[str] | None, str]] = []
    if cfg.planner:
        out.append(("planner", None, planner_target(checks)))
    out.append(("verifier", [c.text for c in checks], verifier_target(pair, checks)))
    for _ in range(cfg.verifier_variants):
        var = variant_checks(pair, rng)
        out.append(("verifier", [c.text for c in var], verifier_target(pair, var)))
    if cfg.no_rubric:
        out.append(("no_rubric", None, no_rubric_target(pair)))
    if cfg.static:
        out.append(("static", None, static_target(pair)))
    return out


_ROLES = {"planner": PLANNER, "verifier": VERIFIER, "no_rubric": NO_RUBRIC, "static": STATIC}


def sft_examples(processor, items: list[Item], cfg: DRSFTConfig, seed: int = 0) -> list[SFTExample]:
    rng = random.Random(seed)
    out = []
    for it in items:
        for role, checks, target in role_texts(it.pair, cfg, rng):
            req = request(processor, _ROLES[role], it, checks)
            out.append(SFTExample(req.prompt, target, req.images))
    return out


PERCEPTION_SPLIT = "perception"  # the split name in the image seeds: disjoint from every pair's image


def perception_samples(tasks: list[str], n_per_task: int, seed: int, image_size: int):
    """``(image, question, facts)`` rendered in memory: ``n_per_task`` per task, seeded like the synthetic data
    set but under the split name ``perception``."""
    from rubricflow.data.synthetic import GENERATORS, _rng

    out = []
    for task in tasks:
        for i in range(n_per_task):
            im, q, _, _, facts = GENERATORS[task](_rng(seed, task, PERCEPTION_SPLIT, i), image_size)
            out.append((im, q, facts))
    return out


def read_examples(processor, samples) -> list[SFTExample]:
    n_img = 1 if hasattr(processor, "chat_prompt") else 0
    return [SFTExample(chat(processor, read_prompt(q), n_img), worked_reading(facts), [im] if n_img else [])
            for im, q, facts in samples]


def pair_tokenizer_corpus(pairs: list[PreferencePair], cfg: DRSFTConfig, seed: int = 0) -> list[str]:
    """Every role prompt and target text of the warm-start SFT set built from these preference pairs (the tiny
    DeltaRubric tokenizer is trained on it)."""
    rng = random.Random(seed)
    texts = ["user assistant system"] * 8  # the chat template's role names
    for p in pairs:
        for role, checks, target in role_texts(p, cfg, rng):
            texts.append(_ROLES[role].prompt(p, checks))
            texts.append(target)
    for p in pairs[:64]:  # the read task's instruction (its images are not pairs; its targets are traces)
        texts.append(read_prompt(p.question))
    return texts
