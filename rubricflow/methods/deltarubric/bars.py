"""The warm start to a bar (issue 39, item 2): staged phases, each trained in blocks until its bars are met on val.

A fixed step count leaves a tiny start near a threshold (across 12 seeds the val oracle accuracy of the 2000-step
start ran 0.52-1.00, and its final loss predicted it, Pearson r = -0.85), so a seed's start could decide a claim. With
``sft.bar_reading`` or ``sft.bar_oracle`` set, the warm start instead runs these phases in order (``STAGES``), each
on its own kind of example plus every earlier phase's (so an earlier skill is kept while the next is taught):

=============  ===================================================================  =====================
phase          examples added                                                       bars
=============  ===================================================================  =====================
``reading``    the read task (read prompt + image -> worked trace; needs             reading
               ``perception_images``)
``evidence``   the verifier's examples (worked reading, one evidence line per        oracle
               check, verdict; the exhaustive mode's too)
``comparison`` the judges that write their own comparison lines: static,            oracle, generative
               generative (both turns, with the lookup tool)
``verdicts``   the rest: planner, no-rubric, reading judge (all examples now)       reading, oracle, planner,
                                                                                    generative
=============  ===================================================================  =====================

A bar at 0 is off; a phase left without an active bar (or without examples) trains one block (or is skipped). A phase
trains ``block_steps`` at a time and measures its bars on val after each block, until every bar is met or it has
trained ``max_steps``. The measures (``val_measure``), all greedy on the val pairs (``bar_pairs`` of them):

* ``reading``: the reading exactness, the share of val pair images whose read (the read prompt, as the reading
  examples teach it) states every claim key of the facts (perception, intermediate, answer) with its true value;
* ``oracle``:  the oracle-checklist accuracy, the share of val pairs where the verifier, given the reference checklist
  (``evaluate.judge`` in mode ``oracle``), picks the preferred response (a format failure is wrong);
* ``planner``: the share of val pairs whose greedy planner output is a valid checklist of the task's checks
  (``planner_well_formed``); without it the last phase ends once reading and oracle hold, which can leave the planner,
  whose examples only that phase adds, a single block;
* ``generative``: the generative control's oracle measure (``generative_oracle``), the share of val pairs where the
  generative judge with the lookup tool, its tool call naming the reference checklist's keys, gives the preferred
  verdict: what the oracle bar is to the verifier. Without it the control, whose examples the comparison phase adds,
  was left under-taught once the oracle bar already held.

A phase that misses a bar at its cap ends the attempt: the warm start restarts from a fresh base with init seed
``seed + 1000 * k`` (``max_restarts``), and every attempt is kept in the summary (``attempts``: per phase the steps,
the blocks' values, the bars, whether they were met). After the last attempt ``BarMissed`` names the phase, the bar,
the value reached and the parameters to change. ``train_to_bar`` and ``train_phase`` take the training and measuring
as functions, so the loop is tested without a model.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rubricflow.data.traces import fmt, values_equal
from rubricflow.methods.deltarubric.config import DeltaRubricConfig, DRSFTConfig, role_max_tokens
from rubricflow.methods.deltarubric.evaluate import judge
from rubricflow.methods.deltarubric.roles import GENERATIVE_TOOL, PLANNER, ROLES
from rubricflow.methods.deltarubric.rollout import Item, request, with_readings
from rubricflow.methods.deltarubric.synthetic import gold_values
from rubricflow.methods.deltarubric.targets import check_keys, claim_values, generative_keys

BARS = ("reading", "oracle", "planner", "generative")
# phase -> (the roles whose examples it adds, the bars it is trained to); in this order
STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "reading": ((), ("reading",)),  # the read task's examples (not a role)
    "evidence": (("verifier",), ("oracle",)),
    "comparison": (("static", "generative", "generative_tool"), ("oracle", "generative")),
    "verdicts": (("planner", "no_rubric", "reading"), ("reading", "oracle", "planner", "generative")),
}
RESTART_SEED = 1000  # attempt k starts from init seed seed + 1000 * k

Measure = Callable[[Sequence[str]], dict[str, float]]  # bar names -> their val values for the model being trained
TrainBlock = Callable[[list, int, int, int], None]  # (examples, steps, batch size, block seed) -> trains in place


def bars_on(cfg: DRSFTConfig) -> bool:
    return any(v > 0 for v in bar_values(cfg).values())


def bar_values(cfg: DRSFTConfig) -> dict[str, float]:
    return {"reading": cfg.bar_reading, "oracle": cfg.bar_oracle, "planner": cfg.bar_planner,
            "generative": cfg.bar_generative}


@dataclass
class Phase:
    name: str
    examples: list
    bars: dict[str, float]  # the active bars: name -> value to reach
    batch_size: int


def staged_phases(reading: list, role_examples: list[tuple[str, Any]], cfg: DRSFTConfig) -> list[Phase]:
    """The phases of ``STAGES`` with their cumulative example lists (``role_examples``: ``(role, example)``); a phase
    that adds no example is left out. The reading phase uses ``perception_batch_size``, the others ``batch_size``."""
    want = bar_values(cfg)
    phases, pool = [], []
    for name, (roles, bars) in STAGES.items():
        added = reading if name == "reading" else [ex for role, ex in role_examples if role in roles]
        if not added:
            continue
        pool = pool + added
        bs = cfg.perception_batch_size if name == "reading" else cfg.batch_size
        phases.append(Phase(name, pool, {b: want[b] for b in bars if want[b] > 0}, bs))
    known = {r for roles, _ in STAGES.values() for r in roles}
    if stray := {role for role, _ in role_examples} - known:
        raise ValueError(f"staged_phases: no phase for the examples of {sorted(stray)}")
    return phases


def train_phase(phase: Phase, train_block: TrainBlock, measure: Measure, block_steps: int, max_steps: int,
                seed: int, block0: int = 0, on_block: Callable[[str, dict], None] | None = None,
                blocks: Sequence[dict] = (), after_block: Callable[[list[dict]], None] | None = None) -> dict:
    """Train ``phase`` in blocks until its bars are met (one block when it has none) or ``max_steps``; block ``b``
    (counted over the attempt from ``block0``) draws its data order from ``seed + 100003 * b``. Returns the phase's
    record: ``steps``, ``blocks`` (steps and values after each), ``bars``, ``reached`` (the last values), ``met``.
    ``blocks``: the records of blocks already trained (a resumed phase goes on after them, and ends at once where the
    last one met the bars or the cap); ``after_block`` gets the blocks so far after each block (a checkpoint)."""
    blocks = [dict(b) for b in blocks]
    used = blocks[-1]["steps"] if blocks else 0
    values = {k: v for k, v in blocks[-1].items() if k != "steps"} if blocks else {}
    met = bool(blocks) and all(values.get(b, 0.0) >= v for b, v in phase.bars.items())
    while not met and used < max_steps:
        n = min(block_steps, max_steps - used)
        train_block(phase.examples, n, phase.batch_size, seed + 100003 * (block0 + len(blocks)))
        used += n
        values = dict(measure(list(phase.bars))) if phase.bars else {}
        blocks.append({"steps": used, **values})
        if on_block is not None:
            on_block(phase.name, blocks[-1])
        met = all(values[b] >= v for b, v in phase.bars.items())
        if after_block is not None:
            after_block(blocks)
    return {"phase": phase.name, "examples": len(phase.examples), "steps": used, "blocks": blocks,
            "bars": dict(phase.bars), "reached": values, "met": met}


class BarMissed(ValueError):
    """The warm start missed a bar after its last restart. A ValueError: the same settings miss it again, so the
    stage is not retried (tasks.stage.NOT_RETRIED); the message names the parameters to change."""


def train_to_bar(attempt: Callable[[int], tuple[list[Phase], TrainBlock, Measure]],
                 cfg: DRSFTConfig, seed: int, on_phase: Callable[[dict], None] | None = None,
                 on_block: Callable[[str, dict], None] | None = None, progress: dict | None = None,
                 checkpoint: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the phases of attempt k = 0, 1, ... (``attempt(init_seed)`` builds the fresh model and returns its
    phases, trainer and measure; ``init_seed = seed + 1000 * k``) until one attempt meets every phase's bars; each
    attempt stops at its first phase that misses. Returns every attempt (``init_seed``, ``phases``, ``steps``,
    ``met``), the last one met; ``on_phase`` / ``on_block`` are told of each phase's record and each block's values
    (progress); raises ``BarMissed`` (with the attempts) after ``max_restarts`` restarts.

    ``checkpoint`` gets the progress after each block: ``attempts`` (those ended), ``init_seed`` (the current
    attempt's), ``phases`` (its ended phases' records), ``phase`` and ``blocks`` (the current phase's blocks so far).
    Given that ``progress`` back, the loop resumes where it was: the ended attempts are kept, and the current attempt
    (whose ``attempt(init_seed)`` is expected to restore the model the checkpoint saved) skips its ended phases and
    goes on after its blocks, so a resumed run trains and measures exactly what the uninterrupted one would."""
    attempts: list[dict] = [dict(a) for a in progress["attempts"]] if progress else []
    for k in range(len(attempts), cfg.max_restarts + 1):
        init_seed = seed + RESTART_SEED * k
        phases, train_block, measure = attempt(init_seed)
        here = progress if progress and progress["init_seed"] == init_seed else None
        records: list[dict] = [dict(r) for r in here["phases"]] if here else []
        block0 = sum(len(r["blocks"]) for r in records)
        for ph in phases[len(records):]:
            done = here["blocks"] if here and here["phase"] == ph.name else ()
            here = None

            def after_block(blocks: list[dict], name: str = ph.name) -> None:
                if checkpoint is not None:
                    checkpoint({"attempts": attempts, "init_seed": init_seed, "phases": records, "phase": name,
                                "blocks": blocks})

            rec = train_phase(ph, train_block, measure, cfg.block_steps, cfg.max_steps, init_seed, block0, on_block,
                              blocks=done, after_block=after_block)
            block0 += len(rec["blocks"])
            records.append(rec)
            if on_phase is not None:
                on_phase(rec)
            if not rec["met"]:
                break
        met = all(r["met"] for r in records) and len(records) == len(phases)
        attempts.append({"init_seed": init_seed, "phases": records, "steps": sum(r["steps"] for r in records),
                         "met": met})
        if met:
            return attempts
    last = attempts[-1]["phases"][-1]
    missed = {b: (v, last["reached"].get(b)) for b, v in last["bars"].items() if not last["reached"].get(b, 0) >= v}
    what = "; ".join(f"bar_{b} {v:.3f}, reached {r:.3f}" for b, (v, r) in missed.items())
    err = BarMissed(
        f"deltarubric warm start: phase {last['phase']!r} missed its bar after {cfg.max_steps} steps on every one of "
        f"{len(attempts)} attempts (init seeds {[a['init_seed'] for a in attempts]}): {what}. Raise "
        "deltarubric.sft.max_steps (the cap per phase) or deltarubric.sft.max_restarts, lower the bar "
        "(deltarubric.sft.bar_reading / bar_oracle / bar_planner / bar_generative), or change the recipe (lr, "
        "batch_size, perception_images)."
    )
    err.attempts = attempts  # type: ignore[attr-defined]
    raise err


# ----------------------------------------------------------------------------------------------------------------
# The val measures


def reading_exact(text: str, facts: dict) -> bool:
    """Whether a read states every claim key of the facts (perception, intermediate, answer) with its true value."""
    got = claim_values(text)
    return all(k in got and values_equal(got[k], fmt(v)) for k, v in gold_values(facts).items())


# The parts of an evidence line a teacher-forced readout scores: a value (after "= "), a mark (yes / no after a value),
# the favoured response (after "-> "), the running verdict (after "so far ", sft.evidence_tally) and the verdict.
_PARTS = {"value": re.compile(r"(?<== )(?:\([^)\n]*\)|[^ ,\n]+)"), "mark": re.compile(r"(?<=[^ ,\n] )(?:yes|no)\b"),
          "favour": re.compile(r"(?<=-> )\w+"), "tally": re.compile(r"(?<=so far )\w+"),
          "verdict": re.compile(r"(?<=verdict: )[AB]")}
READOUT_PARTS = tuple(_PARTS)


def target_parts(tokenizer, text: str, ids: list[int]) -> list[str | None]:
    """The part (``READOUT_PARTS``) each token of ``ids`` (``text`` tokenized) writes, or None: a token is in a part
    when its first non-space character lies in one of the part's spans on an evidence line (``... -> ...``) or the
    verdict line (a token of spaces alone is in none); the worked reading's values are not evidence."""
    spans: list[tuple[int, int, str]] = []
    pos = 0
    for line in text.split("\n"):
        if " -> " in line or line.startswith("verdict:"):
            for name, rx in _PARTS.items():
                spans += [(pos + m.start(), pos + m.end(), name) for m in rx.finditer(line)]
        pos += len(line) + 1
    out, prev = [], ""
    for k in range(len(ids)):
        cur = tokenizer.decode(ids[: k + 1])
        piece = cur[len(prev):] if cur.startswith(prev) else ""
        first = len(prev) + len(piece) - len(piece.lstrip())
        out.append(next((n for a, b, n in spans if a <= first < b), None) if piece.strip() else None)
        prev = cur
    return out


def evidence_readout(dr: DeltaRubricConfig, items: list[Item], model, processor) -> dict[str, float]:
    """Teacher-forced: on each val pair's verifier example under the reference checklist (the warm start's own
    prompt and target, ``sft.evidence_form``; under 'quoted' the prompt quotes the worked reading), the share of the
    target's value, mark, favour, running-verdict (``sft.evidence_tally`` only) and verdict tokens the model's argmax
    predicts (``tf_<part>``). What the greedy oracle measure cannot tell apart: a verifier that copies the claims
    wrong, one that marks them wrong, and one whose verdict ignores its lines."""
    import torch

    from models.processor import text_tokenizer
    from rubricflow.methods.deltarubric.examples import pair_examples
    from rubricflow.training.sft import encode_pairs, target_ids

    tok = text_tokenizer(processor)
    right = dict.fromkeys(READOUT_PARTS, 0)
    total = dict.fromkeys(READOUT_PARTS, 0)
    cfg = dr.sft.model_copy(update={"verifier_variants": 0, "planner_target_noise": 0.0})
    was = model.training
    model.eval()
    for i in range(0, len(items), 16):
        chunk = []
        for it in items[i:i + 16]:
            e = next(e for e in pair_examples(it.pair, cfg, random.Random(0)) if e.mode == "verifier")
            req = request(processor, ROLES[e.role], Item(e.pair, it.images, e.reading), e.checks)
            chunk.append((req, e.target, target_ids(processor, e.target)))
        batch = encode_pairs(processor, [r.prompt for r, _, _ in chunk],
                             [r.images for r, _, _ in chunk] if any(r.images for r, _, _ in chunk) else None,
                             [t for _, _, t in chunk])
        mask = batch.pop("completion_mask")
        with torch.no_grad():
            pred = model(**batch).logits[:, :-1].argmax(-1)
        for r, (_, text, ids) in enumerate(chunk):
            start = int(mask[r].nonzero()[0])
            parts = target_parts(tok, text, ids[:-1])  # the end-of-turn token is no part
            for k, part in enumerate(parts):
                if part is not None:
                    total[part] += 1
                    right[part] += int(pred[r, start + k - 1] == ids[k])
    model.train(was)
    return {f"tf_{p}": right[p] / total[p] for p in READOUT_PARTS if total[p]}


def planner_well_formed(text: str, pair) -> bool:
    """Whether ``text`` is a valid checklist (``PLANNER.parse``) whose every check is one of the pair's task's check
    templates (``targets.check_keys`` finds a key for each)."""
    p = PLANNER.parse(text)
    return p.ok and len(check_keys(pair, p.value)) == len(p.value)


def generative_oracle(gen, processor, items: list[Item], tokens: dict[str, int]) -> float:
    """The share of ``items`` (each with the policy's reading) where the generative judge with the lookup tool, its
    tool call naming the reference checklist's keys (``generative_keys``, the facts' order), gives the preferred
    verdict (greedy; a format failure is wrong)."""
    keys = [generative_keys(it.pair) for it in items]
    reqs = [request(processor, GENERATIVE_TOOL, it, k) for it, k in zip(items, keys)]
    outs = gen.generate(reqs, n=1, max_new_tokens=tokens["verifier"], temperature=0.0)
    right = 0
    for o, it, k in zip(outs, items, keys):
        p = GENERATIVE_TOOL.parse(o[0].text, k)
        right += p.ok and p.value == it.pair.preferred
    return right / len(items)


def generative_calls(gen, processor, items: list[Item], tokens: dict[str, int]) -> float:
    """The share of ``items`` whose greedy generative tool call is valid (``lookup.parse_lookup``) and names keys the
    pair's texts state (a readout recorded with the generative bar, not a bar: its counterpart of the planner bar)."""
    outs = gen.generate([request(processor, GENERATIVE_TOOL, it) for it in items], n=1,
                        max_new_tokens=tokens["planner"], temperature=0.0)
    ok = 0
    for o, it in zip(outs, items):
        p = GENERATIVE_TOOL.call(o[0].text)
        ok += p.ok and set(p.value) <= set(claim_values(it.pair.response_a)) | set(claim_values(it.pair.response_b))
    return ok / len(items)


def val_measure(dr: DeltaRubricConfig, items: list[Item], model, processor) -> Measure:
    """The greedy val measures of ``model`` (see the module docstring): ``reading`` and ``oracle``; with ``oracle``
    also the teacher-forced evidence readout (``evidence_readout``: ``tf_value``, ``tf_mark``, ``tf_favour``,
    ``tf_tally`` with ``sft.evidence_tally``, ``tf_verdict``), recorded with each block's values, never a bar."""
    from rubricflow.sections import GenerationConfig  # torch: imported when a bar is measured
    from rubricflow.training.generation import generator_for

    tokens = role_max_tokens(dr.train)

    def measure(names: Sequence[str]) -> dict[str, float]:
        gen = generator_for(GenerationConfig(), model, processor, batch_size=dr.eval.batch_size, in_memory=True)
        out: dict[str, float] = {}
        quoted = ("oracle" in names or "generative" in names) and dr.verifier_quotes
        # one greedy read per image serves the reading bar and the lookup tool's quotes
        read = with_readings(gen, processor, items, tokens["verifier"]) if "reading" in names or quoted else None
        if "reading" in names:
            out["reading"] = sum(reading_exact(it.reading, it.pair.facts) for it in read) / len(read)
        if "planner" in names:
            reqs = [request(processor, PLANNER, it) for it in items]
            outs = gen.generate(reqs, n=1, max_new_tokens=tokens["planner"], temperature=0.0)
            out["planner"] = sum(planner_well_formed(o[0].text, it.pair) for o, it in zip(outs, items)) / len(items)
        if "oracle" in names:
            res = judge(gen, processor, read if quoted else items, "oracle", tokens, quoted=dr.verifier_quotes)
            out["oracle"] = sum(r.correct for r in res) / len(res)
            out.update(evidence_readout(dr, items, model, processor))
        if "generative" in names:
            out["generative"] = generative_oracle(gen, processor, read, tokens)
            out["generative_call"] = generative_calls(gen, processor, read, tokens)
        return out

    return measure
