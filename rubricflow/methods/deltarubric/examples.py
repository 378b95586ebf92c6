"""The warm start's examples: templated plans and verdicts built from ground-truth facts, and the perception reads.

Per training pair (rubricflow.methods.deltarubric.targets):

* planner:    planner prompt -> the reference checklist (neutral checks on the claims where A and B disagree), or,
              for a share ``planner_target_noise`` of the train pairs, a non-separating checklist (checks on
              claims both responses agree on: a start with room, see ``noisy_checks``);
* verifier:   verifier prompt with the reference checklist -> per-check evidence + the correct verdict, plus
              ``verifier_variants`` examples with a shuffled / extended checklist (so the verifier executes any
              neutral checklist, including the planner's imperfect ones during RL), plus, on a noisy pair, one
              example executing the non-separating checklist (verdict by ``noise_verdict``);
* no_rubric:  no-rubric prompt -> ``verdict: X``;
* static:     static-rubric prompt -> per-criterion preference + verdict;
* reading:    reading-judge prompt -> the verifier's worked reading + verdict (no checklist; the same
              ``worked_reading`` builder as the verifier's target).
* generative: (``generative``) generative-judge prompt -> its reading lines of the keys where the responses disagree
              (``generative_order``: the facts' order or shuffled), one comparison line per key, the verdict; under
              the lookup tool (``evidence_form: quoted``) its two turns: the prompt -> the tool call naming those
              keys, and the prompt with the call and the tool's quotes of the worked reading -> the marked quotes and
              the verdict; plus the second turn on the static-exhaustive keys (the verdict they support, or
              ``noise_verdict`` when they favour neither), as the verifier executes that checklist;
* exhaustive: (``equal_mode_examples`` only) verifier prompt with the static-exhaustive checklist -> its evidence
              lines and the verdict they support (``planning.facts_verdict``; ``noise_verdict`` when they favour
              neither response).

``equal_mode_examples``: every judge mode gets as many examples per pair as the verifier (1 + ``verifier_variants``),
variant v with the responses swapped when v is odd; off, each single-step mode gets one (the default: the example list
of the code before the flag, byte for byte; ``tests/deltarubric/test_warmstart.py`` checks a digest).

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

import functools
import random
from typing import NamedTuple

from rubricflow.data.pairs import PreferencePair
from rubricflow.data.synthetic import GENERATORS, WIDE_GENERATORS, _rng
from rubricflow.methods.deltarubric.config import DRSFTConfig
from rubricflow.methods.deltarubric.lookup import lookup_call
from rubricflow.methods.deltarubric.parsing import MAX_CHECKS
from rubricflow.methods.deltarubric.planning import facts_verdict
from rubricflow.methods.deltarubric.prompts import read_prompt
from rubricflow.methods.deltarubric.roles import ROLES
from rubricflow.methods.deltarubric.rollout import Item, chat, request
from rubricflow.methods.deltarubric.targets import (
    agreed_checks,
    exhaustive_checks,
    generative_keys,
    generative_target,
    generative_tool_target,
    no_rubric_target,
    planner_target,
    reading_target,
    reference_checks,
    static_target,
    variant_checks,
    verifier_target,
    worked_reading,
)
from rubricflow.training.sft import SFTExample


def noisy_checks(pair: PreferencePair, cfg: DRSFTConfig, seed: int):
    """The non-separating checklist a train pair's planner imitates instead of the reference one (drawn with
    probability ``planner_target_noise`` from ``(seed, pair id)``, independent of the order of the pairs), or None:
    val and test pairs, pairs with fewer than two agreed claims, and the pairs not drawn."""
    if pair.split != "train" or cfg.planner_target_noise <= 0:
        return None
    if random.Random(f"planner-noise/{seed}/{pair.id}").random() >= cfg.planner_target_noise:
        return None
    return agreed_checks(pair)


class PairExample(NamedTuple):
    """One warm-start example of a pair: the judge ``mode`` it teaches, the ``role`` whose prompt it uses, the
    checklist in that prompt (or None), the target, and the pair as the prompt shows it (swapped in some variants)."""

    mode: str
    role: str
    checks: list[str] | None
    target: str
    pair: PreferencePair
    reading: str | None = None  # the reading the lookup tool quotes in the prompt (evidence_form quoted)


def _shown(pair: PreferencePair, variant: int) -> PreferencePair:
    """Variant ``v`` of an equal-count mode: the pair as it is (even ``v``) or with the responses swapped (odd)."""
    return pair if variant % 2 == 0 else pair.swapped()


def _coin(cfg: DRSFTConfig, key: str, preferred: str | None) -> str | None:
    """The verdict under a checklist that favours neither response (``noise_verdict``)."""
    return random.Random(key).choice("AB") if cfg.noise_verdict == "coin" else preferred


def pair_examples(pair: PreferencePair, cfg: DRSFTConfig, rng: random.Random, seed: int = 0) -> list[PairExample]:
    """Every warm-start example of one pair (module docstring), in a fixed order: planner, verifier (reference, then
    ``verifier_variants`` variants, then the noisy checklist), exhaustive (``equal_mode_examples`` only), no-rubric,
    static, reading, generative. ``rng`` draws the verifier's variant checklists only (the other draws are seeded by
    pair and seed), so the default examples are those of the code before ``equal_mode_examples`` and ``generative``."""
    checks = reference_checks(pair)
    noisy = noisy_checks(pair, cfg, seed)
    form, tally = cfg.evidence_form, cfg.evidence_tally

    def executed(role: str, checks, q: PreferencePair = pair, verdict: str | None = None) -> PairExample:
        """A verifier example: ``q`` judged by executing ``checks`` (evidence lines in ``cfg.evidence_form``; under
        'quoted' the prompt quotes the worked reading, the reading a policy that reads right gives the tool)."""
        reading = worked_reading(q.facts) if form == "quoted" else None
        target = verifier_target(q, checks, verdict, form, tally)
        return PairExample(role, "verifier", [c.text for c in checks], target, q, reading)

    @functools.cache
    def exhaustive_of(v: int) -> tuple[PreferencePair, list, str | None]:
        """Variant ``v``'s pair, its static-exhaustive checklist and the verdict that checklist supports (the noise
        rule when it favours neither): one draw, shared by the verifier's exhaustive example and the generative
        judge's second turn on the same keys, so both controls are taught one verdict for one checklist."""
        q = _shown(pair, v)
        ex = exhaustive_checks(q, MAX_CHECKS)
        return q, ex, facts_verdict(q, [c.id for c in ex]) or _coin(cfg, f"exhaustive-verdict/{seed}/{pair.id}/{v}",
                                                                    q.preferred)

    out: list[PairExample] = []
    if cfg.planner:
        out.append(PairExample("planner", "planner", None, planner_target(noisy or checks), pair))
    out.append(executed("verifier", checks))
    for _ in range(cfg.verifier_variants):
        out.append(executed("verifier", variant_checks(pair, rng)))
    if noisy:  # the verifier follows the checklist it is given: here one that favours neither response
        verdict = _coin(cfg, f"noise-verdict/{seed}/{pair.id}", None)  # None: the preferred response
        out.append(executed("noise", noisy, verdict=verdict))
    n = 1 + cfg.verifier_variants if cfg.equal_mode_examples else 1
    if cfg.equal_mode_examples:  # the exhaustive mode: the verifier on the static-exhaustive checklist
        for v in range(n):
            # the verifier follows its checklist: the response it favours, or the noise rule when it favours neither
            q, ex, verdict = exhaustive_of(v)
            out.append(executed("exhaustive", ex, q, verdict))
    single = [("no_rubric", cfg.no_rubric, no_rubric_target), ("static", cfg.static, static_target),
              ("reading", cfg.reading, reading_target)]
    for mode, on, target in single:
        if on:
            out += [PairExample(mode, mode, None, target(q), q) for q in (_shown(pair, v) for v in range(n))]
    if cfg.generative:
        for v in range(n):
            q = _shown(pair, v)
            keys = generative_keys(q, cfg.generative_order, random.Random(f"generative/{seed}/{pair.id}/{v}"))
            if form == "quoted":  # the lookup tool: the call, then (after the tool's quotes) the marks and verdict
                reading = worked_reading(q.facts)
                out.append(PairExample("generative", "generative_tool", None, lookup_call(keys), q, reading))
                out.append(PairExample("generative", "generative_tool", keys,
                                       generative_tool_target(q, keys, tally=tally), q, reading))
                # its second turn on the static-exhaustive keys too, as the verifier executes that checklist: a call
                # on keys that need not separate the responses is executed as quoted (the verdict they support, or
                # the noise rule when they favour neither), not with a difference the reference keys always had
                _, ex, verdict = exhaustive_of(v)
                ex_keys = [c.id for c in ex]
                out.append(PairExample("generative", "generative_tool", ex_keys,
                                       generative_tool_target(q, ex_keys, None, verdict, tally), q, reading))
            else:
                out.append(PairExample("generative", "generative", None, generative_target(q, keys, tally), q))
    return out


def role_texts(pair: PreferencePair, cfg: DRSFTConfig, rng: random.Random,
               seed: int = 0) -> list[tuple[str, list[str] | None, str]]:
    """``(role name, checklist or None, target)`` for every example of one pair (``pair_examples``; a swapped
    variant's prompt shows the responses the other way round)."""
    return [(e.role, e.checks, e.target) for e in pair_examples(pair, cfg, rng, seed)]


def mode_examples(processor, items: list[Item], cfg: DRSFTConfig,
                  seed: int = 0) -> list[tuple[PairExample, SFTExample]]:
    """Every pair example with its SFT example (chat prompt with the pair's images)."""
    rng = random.Random(seed)
    out = []
    for it in items:
        for e in pair_examples(it.pair, cfg, rng, seed):
            req = request(processor, ROLES[e.role], Item(e.pair, it.images, e.reading), e.checks)
            out.append((e, SFTExample(req.prompt, e.target, req.images)))
    return out


def sft_examples(processor, items: list[Item], cfg: DRSFTConfig, seed: int = 0) -> list[SFTExample]:
    return [ex for _, ex in mode_examples(processor, items, cfg, seed)]


PERCEPTION_SPLIT = "perception"  # the split name in the image seeds: disjoint from every pair's image


def perception_samples(tasks: list[str], n_per_task: int, seed: int, image_size: int, keys: int | None = None):
    """``(image, question, facts)`` rendered in memory: ``n_per_task`` per task, seeded like the synthetic data
    set but under the split name ``perception``; ``keys``: the wide generators with that many perception keys (the
    pairs' ``form: wide``), None = the tasks' own."""
    out = []
    for task in tasks:
        for i in range(n_per_task):
            if keys is None:
                im, q, _, _, facts = GENERATORS[task](_rng(seed, task, PERCEPTION_SPLIT, i), image_size)
            else:
                rng = _rng(seed, f"{task}-wide{keys}", PERCEPTION_SPLIT, i)
                im, q, _, _, facts = WIDE_GENERATORS[task](rng, image_size, keys)
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
        for e in pair_examples(p, cfg, rng, seed):
            role = ROLES[e.role]
            texts.append(role.prompt(e.pair, e.checks, e.reading))
            if role.turn is not None and e.checks is not None:  # a tool call and the tool's answer
                texts.append(role.turn(e.pair, e.checks, e.reading))
            texts.append(e.target)
    for p in pairs[:64]:  # the read task's instruction (its images are not pairs; its targets are traces)
        texts.append(read_prompt(p.question))
    return texts
