"""Multi-role rollouts: planner checklists, guided verdicts and no-rubric verdicts -> episodes of both roles.

Per pair (one GRPO "prompt"), with ``train.judge: deltarubric`` (the method):

1. the planner samples N checklists; the policy also samples K no-rubric verdicts (the baseline of the rewards);
2. every *valid* checklist is executed M times by the verifier (same policy, verifier prompt);
3. rewards (rubricflow.methods.deltarubric.rewards): verifier ``c + lambda * c * (1 - c0)`` with ``c0`` the paired
   no-rubric verdict (verdict m <-> no-rubric sample m mod K) or the pair's rate (``guidance``); planner 0 if
   malformed, else ``1 + quality`` (``planner_reward``: improvement / shift / absolute);
4. episodes: planner episodes grouped per pair (``<pair>/plan``), verifier episodes grouped per checklist
   (``<pair>/c<j>``), roles ``"planner"`` / ``"verifier"``. The GRPO updater normalises advantages per role
   (decoupled), and one ``update`` call trains the shared policy on both roles' episodes.

With ``train.judge: no_rubric | static | reading | generative`` (the paper's trained baselines, the reading judge:
the verifier's worked reading without a checklist, and the generative judge) the policy samples ``N * M`` verdicts of
that judge mode per pair, as many as DeltaRubric's verifier samples, rewarded by correctness and grouped per pair
(role ``no_rubric`` / ``static`` / ``reading`` / ``generative``), with the same steps, pairs per step and optimiser.
Under the lookup tool (``quoted``) the generative judge samples ``N * M`` tool calls, and each valid call its second
turn after the tool's quotes; both turns are episodes of the sample, with its reward.

Rollout metrics beside the rewards: the share of *flat* groups (every sample of a pair earned one reward, so it teaches
nothing: ``planner/flat_groups``, ``<judge>/flat_groups``), and ``planner/relative_differs``, the share of planner
groups where the relative (``improvement``) and the absolute reward would move the checklists differently
(``rewards.same_direction``), whichever of them trains: where it is small, relative against absolute tests little.

``collect`` does the generation; ``score`` is pure (completions in, episodes and metrics out), so tests drive the
real episode/advantage path with scripted completions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from models.generation import Completion, GenRequest
from models.processor import text_tokenizer
from rubricflow.data.pairs import PreferencePair
from rubricflow.grpo.types import Episode
from rubricflow.methods.deltarubric.config import DRTrainConfig
from rubricflow.methods.deltarubric.prompts import read_prompt
from rubricflow.methods.deltarubric.rewards import accuracy, same_direction
from rubricflow.methods.deltarubric.roles import GENERATIVE_TOOL, NO_RUBRIC, PLANNER, ROLES, VERIFIER, Role, role_of
from rubricflow.methods.deltarubric.targets import separates


def chat(processor, text: str, n_images: int) -> str:
    """The chat-formatted generation prompt (VLM processor, or a text tokenizer with images dropped). The image
    comes after the text, right before the reply: DeltaRubric's prompts are long (question, two responses, a
    checklist), and the tiny policy reads its image reliably only a few tokens before it writes what it read."""
    if hasattr(processor, "chat_prompt"):
        return processor.chat_prompt(text, n_images=n_images, images_last=True)
    tok = text_tokenizer(processor)
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


@dataclass
class Item:
    """A pair and its loaded images (PIL), the unit of rollouts and evaluation; ``reading``: the policy's reading of
    the image, which the lookup tool quotes in the verifier's prompt (``sft.evidence_form: quoted``; None: no tool)."""

    pair: PreferencePair
    images: list[Any]
    reading: str | None = None


def request(processor, role: Role, item: Item, checks: list[str] | None = None) -> GenRequest:
    """The generation request of ``role`` on ``item``; for a tool-using role given ``checks`` (the keys it looked
    up), the request of its second turn: the prompt, its call and the tool's answer."""
    n = len(item.images) if hasattr(processor, "chat_prompt") else 0
    text = chat(processor, role.prompt(item.pair, checks, item.reading), n)
    if role.turn is not None and checks is not None:
        text += role.turn(item.pair, checks, item.reading)
    return GenRequest(text, list(item.images) if n else [])


def with_readings(gen, processor, items: list[Item], max_new_tokens: int) -> list[Item]:
    """``items`` with the policy's greedy reading of each image (the ``READ`` prompt with the pair's first image, as
    the read task teaches it; a call of its own before the verifier's), which the lookup tool quotes and the warm
    start's reading bar scores; an item that has one keeps it. Not a trained sample."""
    todo = [i for i, it in enumerate(items) if it.reading is None]
    n_img = 1 if hasattr(processor, "chat_prompt") else 0
    reqs = [GenRequest(chat(processor, read_prompt(items[i].pair.question), n_img), list(items[i].images)[:n_img])
            for i in todo]
    outs = gen.generate(reqs, n=1, max_new_tokens=max_new_tokens, temperature=0.0)  # [] -> [] (ZeRO-3: every rank)
    out = list(items)
    for i, o in zip(todo, outs):
        out[i] = replace(items[i], reading=o[0].text)
    return out


def episode_prompt(req: GenRequest) -> Any:
    return {"text": req.prompt, "images": req.images} if req.images else req.prompt


def actions_of(c: Completion, eos_id: int) -> list[int]:
    """Completion token ids, plus EOS when the completion ended with it (so the policy learns to stop)."""
    return list(c.token_ids) + ([eos_id] if c.finished else [])


@dataclass
class Rollout:
    """Raw samples of one step: per item, the planner / no-rubric completions and, per valid checklist, M verdicts."""

    items: list[Item]
    planner_reqs: list[GenRequest]
    planner: list[list[Completion]]
    no_rubric: list[list[Completion]]
    verifier_reqs: dict[tuple[int, int], GenRequest] = field(default_factory=dict)
    verifier: dict[tuple[int, int], list[Completion]] = field(default_factory=dict)
    checklists: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    judge_reqs: list[GenRequest] = field(default_factory=list)  # single-step judge runs (train.judge)
    judge: list[list[Completion]] = field(default_factory=list)
    # a tool-using judge (with_tool): per (item, sample) with a valid tool call, the keys, its second turn's request
    # and output
    with_tool: bool = False
    tool_keys: dict[tuple[int, int], list[str]] = field(default_factory=dict)
    tool_reqs: dict[tuple[int, int], GenRequest] = field(default_factory=dict)
    tool: dict[tuple[int, int], Completion] = field(default_factory=dict)


def collect(gen, processor, items: list[Item], cfg: DRTrainConfig, seed: int | None = None,
            quoted: bool = False) -> Rollout:
    """One step's samples; ``quoted``: the verifier gets the lookup tool's quotes of the policy's own reading of each
    image (read greedily once per pair, before the verifier)."""
    g = cfg.grpo
    if cfg.judge != "deltarubric":
        role = role_of(cfg.judge, quoted)
        if role.turn is not None:
            return _collect_with_tool(gen, processor, with_readings(gen, processor, items, cfg.verifier_max_tokens),
                                      role, cfg, seed)
        reqs = [request(processor, role, it) for it in items]
        outs = gen.generate(reqs, n=cfg.n_checklists * cfg.m_verdicts, max_new_tokens=cfg.verifier_max_tokens,
                            temperature=g.temperature, top_p=g.top_p, seed=seed)
        return Rollout(items, [], [], [], judge_reqs=reqs, judge=outs)
    p_reqs = [request(processor, PLANNER, it) for it in items]
    planner = gen.generate(p_reqs, n=cfg.n_checklists, max_new_tokens=cfg.planner_max_tokens,
                           temperature=g.temperature, top_p=g.top_p, seed=seed)
    nr_reqs = [request(processor, NO_RUBRIC, it) for it in items]
    no_rubric = gen.generate(nr_reqs, n=cfg.k_no_rubric, max_new_tokens=cfg.verifier_max_tokens,
                             temperature=g.temperature, top_p=g.top_p)
    if quoted:
        items = with_readings(gen, processor, items, cfg.verifier_max_tokens)
    ro = Rollout(items, p_reqs, planner, no_rubric)
    keys, v_reqs = [], []
    for i, comps in enumerate(planner):
        for j, c in enumerate(comps):
            parsed = PLANNER.parse(c.text)
            if parsed.ok:
                keys.append((i, j))
                ro.checklists[(i, j)] = parsed.value
                v_reqs.append(request(processor, VERIFIER, items[i], parsed.value))
    # called even with no valid checklist: under ZeRO-3 the other ranks' generation needs this rank's forwards
    outs = gen.generate(v_reqs, n=cfg.m_verdicts, max_new_tokens=cfg.verifier_max_tokens,
                        temperature=g.temperature, top_p=g.top_p)
    ro.verifier_reqs = dict(zip(keys, v_reqs))
    ro.verifier = dict(zip(keys, outs))
    return ro


def _collect_with_tool(gen, processor, items: list[Item], role: Role, cfg: DRTrainConfig,
                       seed: int | None) -> Rollout:
    """A tool-using judge's samples: ``N * M`` sampled tool calls per item, then one sampled second turn per valid
    call (after the tool's answer)."""
    g = cfg.grpo
    reqs = [request(processor, role, it) for it in items]
    calls = gen.generate(reqs, n=cfg.n_checklists * cfg.m_verdicts, max_new_tokens=cfg.planner_max_tokens,
                         temperature=g.temperature, top_p=g.top_p, seed=seed)
    ro = Rollout(items, [], [], [], judge_reqs=reqs, judge=calls, with_tool=True)
    for i, comps in enumerate(calls):
        for s, c in enumerate(comps):
            parsed = role.call(c.text)
            if parsed.ok:
                ro.tool_keys[(i, s)] = parsed.value
                ro.tool_reqs[(i, s)] = request(processor, role, items[i], parsed.value)
    # called even with no valid call: under ZeRO-3 the other ranks' generation needs this rank's forwards
    outs = gen.generate(list(ro.tool_reqs.values()), n=1, max_new_tokens=cfg.verifier_max_tokens,
                        temperature=g.temperature, top_p=g.top_p)
    ro.tool = {k: o[0] for k, o in zip(ro.tool_reqs, outs)}
    return ro


def _correct(role: Role, text: str, preferred: str, checks: list[str] | None = None) -> tuple[float, bool]:
    parsed = role.parse(text, checks)
    return float(parsed.ok and parsed.value == preferred), parsed.ok


def _mean(xs) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def score(ro: Rollout, cfg: DRTrainConfig, eos_id: int) -> tuple[list[Episode], dict[str, float]]:
    """Rewards and episodes of the trained roles (pure: no model), plus per-role rollout metrics."""
    if cfg.judge != "deltarubric":
        return _score_judge(ro, cfg, eos_id)
    episodes: list[Episode] = []
    n_plan = n_plan_bad = 0
    n_nr = n_nr_bad = n_ver = n_ver_bad = 0
    acc0s, acc_cs, gains, ver_correct, plan_r, ver_r, bonus = [], [], [], [], [], [], []
    flat, separating = [], []  # per pair: no reward variance in the planner's group; per checklist: it separates
    differ = []  # per pair: the relative and the absolute planner reward move the group's checklists differently
    for i, it in enumerate(ro.items):
        group_r, group_rel, group_abs = [], [], []
        pair = it.pair
        nr = [_correct(NO_RUBRIC, c.text, pair.preferred) for c in ro.no_rubric[i]]
        acc0 = accuracy([c for c, _ in nr])
        n_nr += len(nr)
        n_nr_bad += sum(not ok for _, ok in nr)
        acc0s.append(acc0)
        for j, c in enumerate(ro.planner[i]):
            n_plan += 1
            verdicts = ro.verifier.get((i, j))
            valid = verdicts is not None
            acc_c = None
            if valid:
                checks = ro.checklists[(i, j)]
                vc = [_correct(VERIFIER, v.text, pair.preferred, checks) for v in verdicts]
                acc_c = accuracy([x for x, _ in vc])
                acc_cs.append(acc_c)
                gains.append(acc_c - acc0)
                for m, (v, (cor, ok)) in enumerate(zip(verdicts, vc)):
                    c0 = nr[m % len(nr)][0]  # verdict m <-> no-rubric sample m mod K
                    r = VERIFIER.reward(cor, c0, acc0, cfg.guidance_lambda, cfg.guidance)
                    n_ver += 1
                    n_ver_bad += not ok
                    ver_correct.append(cor)
                    ver_r.append(r)
                    bonus.append(float(cor and not c0))
                    episodes.append(
                        Episode(episode_prompt(ro.verifier_reqs[(i, j)]), actions_of(v, eos_id), r,
                                f"{pair.id}/c{j}", "verifier",
                                {"pair": pair.id, "correct": cor, "acc0": acc0, "paired_no_rubric": c0})
                    )
            else:
                n_plan_bad += 1
            r = PLANNER.reward(valid, acc_c, acc0, cfg.planner_reward)
            plan_r.append(r)
            group_r.append(r)
            group_rel.append(PLANNER.reward(valid, acc_c, acc0, "improvement"))
            group_abs.append(PLANNER.reward(valid, acc_c, acc0, "absolute"))
            if pair.facts:  # synthetic pairs: which claims the responses disagree on is known
                separating.append(float(valid and separates(pair, ro.checklists[(i, j)])))
            episodes.append(
                Episode(episode_prompt(ro.planner_reqs[i]), actions_of(c, eos_id), r, f"{pair.id}/plan", "planner",
                        {"pair": pair.id, "valid": valid, "acc_c": acc_c, "acc0": acc0})
            )
        if group_r:
            flat.append(float(max(group_r) - min(group_r) < 1e-9))
            differ.append(float(not same_direction(group_rel, group_abs)))

    metrics = {
        "planner/format_violation": n_plan_bad / max(n_plan, 1),
        "planner/reward": _mean(plan_r),
        "planner/guided_accuracy": _mean(acc_cs),
        "planner/gain_over_no_rubric": _mean(gains),
        "planner/improved": _mean([float(x > 0) for x in gains]),
        # the precondition of planner RL: groups whose N checklists all earn the same reward teach the planner nothing
        "planner/flat_groups": _mean(flat),
        "planner/separating": _mean(separating),
        # whether relative > absolute can act: where the two readings give a group the same advantages up to a
        # positive factor (rewards.same_direction), which one trains makes no difference within it
        "planner/relative_differs": _mean(differ),
        "verifier/accuracy": _mean(ver_correct),
        "verifier/format_violation": n_ver_bad / max(n_ver, 1) if n_ver else math.nan,
        "verifier/reward": _mean(ver_r),
        "verifier/bonus_rate": _mean(bonus),
        "no_rubric/accuracy": _mean(acc0s),
        "no_rubric/format_violation": n_nr_bad / max(n_nr, 1),
        "episodes/planner": float(sum(e.role == "planner" for e in episodes)),
        "episodes/verifier": float(sum(e.role == "verifier" for e in episodes)),
    }
    return episodes, metrics


def _score_judge(ro: Rollout, cfg: DRTrainConfig, eos_id: int) -> tuple[list[Episode], dict[str, float]]:
    """A single-step judge trained alone (no-rubric, static, reading, generative): reward = correctness. A tool-using
    judge's sample is two episodes with the sample's reward: its tool call, grouped with every call on the pair
    (``<pair>/<judge>``), and its second turn, grouped with the pair's other second turns (``<pair>/<judge>/answer``),
    as DeltaRubric groups its planner's checklists and its verifier's verdicts apart, so each sample counts once in
    each group's baseline; a call that breaks the contract is a format failure (reward 0, one episode), and so is a
    second turn without one comparison line per key looked up."""
    name = cfg.judge
    role = ROLES[name]
    episodes: list[Episode] = []
    correct, bad = [], 0
    flat = []  # per pair: every sample of the pair earned one reward (a tool call's group; its second turns' too)
    for i, it in enumerate(ro.items):
        group = f"{it.pair.id}/{name}"
        group_r = []
        for s, c in enumerate(ro.judge[i]):
            second = ro.tool.get((i, s))
            if ro.with_tool:
                cor, ok = ((0.0, False) if second is None
                           else _correct(GENERATIVE_TOOL, second.text, it.pair.preferred, ro.tool_keys[(i, s)]))
            else:
                cor, ok = _correct(role, c.text, it.pair.preferred)
            correct.append(cor)
            bad += not ok
            r = role.reward(cor)
            group_r.append(r)
            meta = {"pair": it.pair.id, "correct": cor}
            episodes.append(Episode(episode_prompt(ro.judge_reqs[i]), actions_of(c, eos_id), r, group, name, meta))
            if second is not None:
                episodes.append(Episode(episode_prompt(ro.tool_reqs[(i, s)]), actions_of(second, eos_id), r,
                                        f"{group}/answer", name, {**meta, "turn": 2}))
        if group_r:
            flat.append(float(max(group_r) - min(group_r) < 1e-9))
    n = max(len(correct), 1)
    # the precondition of the judge's RL, as the planner's: groups whose samples all earn one reward teach nothing
    return episodes, {f"{name}/accuracy": _mean(correct), f"{name}/format_violation": bad / n,
                      f"{name}/flat_groups": _mean(flat), f"episodes/{name}": float(len(episodes))}
