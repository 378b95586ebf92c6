"""SFT warm start for the shared policy: templated plans and verdicts built from ground-truth facts.

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

Perception (``perception_images`` per task, ``read_examples``): images rendered in memory by the synthetic
generators under their own split name (``"perception"``, so never a train/val/test image), each with the read
prompt (question + image) and the worked trace of its ground truth as the target: the verifier's first line. With
``perception_steps > 0`` they are a first phase of their own (short sequences, so many images for little time),
before the role examples; with 0 they are mixed into them. A verifier that cannot read its image has nothing for a
checklist to guide.

The baselines get examples too: the tiny model has no instruction following of its own, and the comparison
between judge modes is only fair when every mode's output format was taught equally.

``warm_start`` is the ``deltarubric_sft`` stage: the base model (``build_or_load_base``), the examples, the phases.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from models.loader import load_policy
from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save
from rubricflow.data.pairs import PreferencePair, read_pairs
from rubricflow.data.synthetic import GENERATORS, WIDE_GENERATORS, _rng
from rubricflow.methods.deltarubric.config import DeltaRubricConfig, DRSFTConfig
from rubricflow.methods.deltarubric.evaluate import load_items
from rubricflow.methods.deltarubric.prompts import read_prompt
from rubricflow.methods.deltarubric.roles import ROLES
from rubricflow.methods.deltarubric.rollout import Item, chat, request
from rubricflow.util.io import staged_dir, write_json
from rubricflow.methods.deltarubric.targets import (
    agreed_checks,
    no_rubric_target,
    planner_target,
    reading_target,
    reference_checks,
    static_target,
    variant_checks,
    verifier_target,
    worked_reading,
)
from rubricflow.pipeline.progress import progress
from rubricflow.sections import ModelsConfig
from rubricflow.training.sft import SFTExample, train_sft


def noisy_checks(pair: PreferencePair, cfg: DRSFTConfig, seed: int):
    """The non-separating checklist a train pair's planner imitates instead of the reference one (drawn with
    probability ``planner_target_noise`` from ``(seed, pair id)``, independent of the order of the pairs), or None:
    val and test pairs, pairs with fewer than two agreed claims, and the pairs not drawn."""
    if pair.split != "train" or cfg.planner_target_noise <= 0:
        return None
    if random.Random(f"planner-noise/{seed}/{pair.id}").random() >= cfg.planner_target_noise:
        return None
    return agreed_checks(pair)


def role_texts(pair: PreferencePair, cfg: DRSFTConfig, rng: random.Random,
               seed: int = 0) -> list[tuple[str, list[str] | None, str]]:
    """``(role name, checklist or None, target)`` for every example of one pair."""
    checks = reference_checks(pair)
    noisy = noisy_checks(pair, cfg, seed)
    out: list[tuple[str, list[str] | None, str]] = []
    if cfg.planner:
        out.append(("planner", None, planner_target(noisy or checks)))
    out.append(("verifier", [c.text for c in checks], verifier_target(pair, checks)))
    for _ in range(cfg.verifier_variants):
        var = variant_checks(pair, rng)
        out.append(("verifier", [c.text for c in var], verifier_target(pair, var)))
    if noisy:  # the verifier follows the checklist it is given: here one that favours neither response
        verdict = random.Random(f"noise-verdict/{seed}/{pair.id}").choice("AB") if cfg.noise_verdict == "coin" else None
        out.append(("verifier", [c.text for c in noisy], verifier_target(pair, noisy, verdict)))
    if cfg.no_rubric:
        out.append(("no_rubric", None, no_rubric_target(pair)))
    if cfg.static:
        out.append(("static", None, static_target(pair)))
    if cfg.reading:
        out.append(("reading", None, reading_target(pair)))
    return out


def sft_examples(processor, items: list[Item], cfg: DRSFTConfig, seed: int = 0) -> list[SFTExample]:
    rng = random.Random(seed)
    out = []
    for it in items:
        for role, checks, target in role_texts(it.pair, cfg, rng, seed):
            req = request(processor, ROLES[role], it, checks)
            out.append(SFTExample(req.prompt, target, req.images))
    return out


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
        for role, checks, target in role_texts(p, cfg, rng, seed):
            texts.append(ROLES[role].prompt(p, checks))
            texts.append(target)
    for p in pairs[:64]:  # the read task's instruction (its images are not pairs; its targets are traces)
        texts.append(read_prompt(p.question))
    return texts


# ----------------------------------------------------------------------------------------------------------------
# The warm start (the ``deltarubric_sft`` stage)


def build_or_load_base(models: ModelsConfig, dr: DeltaRubricConfig, train_pairs, seed: int):
    """Tiny profile: build a fresh tiny model whose tokenizer is trained on DeltaRubric's prompts and targets;
    pretrained: load ``models.policy.path``."""
    spec = models.policy
    if spec.source == "pretrained":
        return load_policy(spec.path, dtype=spec.dtype)
    dims = TinyDims(
        hidden_size=dr.sft.hidden_size or spec.hidden_size, num_layers=spec.num_layers, num_heads=spec.num_heads,
        num_kv_heads=max(1, spec.num_heads // 2), vision_hidden_size=spec.vision_hidden_size,
        vision_depth=spec.vision_depth, vocab_size=spec.vocab_size, image_size=dr.pairs.image_size,
    )
    build = build_tiny_vl if spec.arch == "qwen2_5_vl" else build_tiny_text
    model, proc = build(pair_tokenizer_corpus(train_pairs, dr.sft, seed), dims, seed=seed)
    with staged_dir(dr.sft.base_dir) as tmp:
        save(model, proc, tmp)
    return model, proc


def warm_start(dr: DeltaRubricConfig, models: ModelsConfig, seed: int, reports_dir: Path, run: Any,
               log_fn=None) -> dict:
    """Warm start on the train pairs (and, with ``sft.perception_images``, the reading examples first): saves the
    policy to ``sft.out_dir`` and the loss curve to ``reports_dir/plots/deltarubric_sft_loss.json``; logs every
    10th step to ``run`` and every step to ``log_fn``; returns the example counts and the losses."""
    d = Path(dr.pairs.out_dir)
    train = read_pairs(d, "train")
    if not train:
        raise ValueError(f"{d}: no train pairs; set deltarubric.pairs.train > 0")
    if dr.sft.init_from:
        model, proc = load_policy(dr.sft.init_from, dtype=models.policy.dtype)
    else:
        model, proc = build_or_load_base(models, dr, train, seed)
    examples = sft_examples(proc, load_items(d, train), dr.sft, seed=seed)
    n_pair_examples = len(examples)
    reading: list = []
    if dr.sft.perception_images:
        samples = perception_samples(list(dr.pairs.tasks), dr.sft.perception_images, dr.pairs.seed,
                                     dr.pairs.image_size, dr.pairs.keys if dr.pairs.form == "wide" else None)
        reading = read_examples(proc, samples)
    phases = [("roles", examples, dr.sft.steps, dr.sft.batch_size)]
    if reading and dr.sft.perception_steps:
        phases.insert(0, ("reading", reading, dr.sft.perception_steps, dr.sft.perception_batch_size))
    else:
        examples += reading
    curve: list[dict] = []
    offset = 0

    def log(step: int, m: dict, phase: str) -> None:
        curve.append({"step": offset + step, "phase": phase, "loss": m["sft/loss"]})
        if log_fn is not None:
            log_fn(offset + step, m)
        if step % 10 == 0:
            run.log_metrics(m, step=offset + step)

    t0 = time.perf_counter()
    losses: list[float] = []
    with progress("deltarubric sft", total=sum(p[2] for p in phases)) as bar:
        for phase, exs, steps, bs in phases:
            losses = train_sft(
                model, proc, exs, dr.sft.model_copy(update={"steps": steps, "batch_size": bs}), seed=seed,
                log_fn=lambda s, m, ph=phase: (log(s, m, ph), bar.advance(1, loss=m["sft/loss"])),
            )
            offset += steps
    sft_s = time.perf_counter() - t0
    with staged_dir(dr.sft.out_dir) as tmp:
        save(model, proc, tmp)
    write_json(Path(reports_dir) / "plots" / "deltarubric_sft_loss.json", curve)
    tail = losses[-20:]
    return {
        "train_examples": len(examples),
        "pair_examples": n_pair_examples,
        "reading_examples": len(reading),
        "reading_steps": dr.sft.perception_steps if reading else 0,
        "params": sum(p.numel() for p in model.parameters()),
        "first_loss": losses[0] if losses else None,
        "final_loss": sum(tail) / len(tail) if tail else None,
        "sft_seconds": round(sft_s, 1),
    }
