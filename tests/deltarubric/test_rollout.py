"""Multi-role rollouts: hand-computed rewards, episode layout, and decoupled per-role advantages through the real
collect -> score -> GRPOUpdater.update path (a scripted generator stands in for sampling)."""

import math

import pytest
import torch

import rubricflow.config  # noqa: F401  (compose Config before importing rubricflow.grpo: avoids an import cycle)
import rubricflow.grpo.updater as updater_mod
from models.generation import Completion
from rubricflow.methods.deltarubric.config import DRTrainConfig, effective_grpo
from rubricflow.methods.deltarubric.evaluate import load_items
from rubricflow.methods.deltarubric.prompts import NO_RUBRIC, PLANNER, READING, STATIC, VERIFIER
from rubricflow.methods.deltarubric.rollout import collect, score
from rubricflow.methods.deltarubric.synthetic import build_pairs
from rubricflow.methods.deltarubric.targets import disagreement_keys
from rubricflow.data.pairs import read_pairs
from rubricflow.grpo.causal_lm import CausalLMAdapter
from rubricflow.grpo.core import grouped_advantages
from rubricflow.grpo.engine import TorchEngine
from rubricflow.grpo.updater import GRPOUpdater

_PLAN_HEAD = PLANNER.split("\n")[0]
_VER_HEAD = VERIFIER.split("\n")[0]
_NR_HEAD = NO_RUBRIC.split("\n")[0]
_ST_HEAD = STATIC.split("\n")[0]
_RD_HEAD = READING.split("\n")[0]


class ScriptedGen:
    """Returns fixed completions per role (recognised from the prompt's instruction line) and per pair.

    ``script[role][pair_index]`` is a list of texts, cycled over the ``n`` samples; pairs are recognised by their
    question text's position in ``questions``."""

    def __init__(self, tokenizer, script, questions):
        self.tok, self.script, self.questions = tokenizer, script, questions
        self.calls = []

    def _role(self, prompt):
        for head, role in ((_PLAN_HEAD, "planner"), (_VER_HEAD, "verifier"), (_NR_HEAD, "no_rubric"),
                           (_ST_HEAD, "static"), (_RD_HEAD, "reading")):
            if head in prompt:
                return role
        raise AssertionError(f"unknown role in prompt {prompt!r}")

    def _pair(self, prompt):
        hits = [i for i, q in enumerate(self.questions) if q in prompt]
        assert len(hits) == 1
        return hits[0]

    def generate(self, requests, n=1, max_new_tokens=48, temperature=1.0, top_p=1.0, seed=None):
        out = []
        for r in requests:
            role = self._role(r.prompt)
            self.calls.append((role, n, max_new_tokens))
            texts = self.script[role][self._pair(r.prompt)]
            comps = []
            for k in range(n):
                t = texts[k % len(texts)]
                comps.append(Completion(self.tok(t, add_special_tokens=False)["input_ids"], t, True))
            out.append(comps)
        return out

    def sync_weights(self, model):
        pass


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from rubricflow.testing.toy_task import build_toy_policy

    d = tmp_path_factory.mktemp("pairs")
    build_pairs(d, ["counting"], {"train": 2}, seed=11, partial_frac=0.0)
    pairs = read_pairs(d, "train")
    # distinct questions so the scripted generator can tell the pairs apart
    pairs[0].question, pairs[1].question = ("How many red shapes are there? (one)",
                                            "How many red shapes are there? (two)")
    items = load_items(d, pairs)
    model, proc = build_toy_policy("vl", hidden=32, layers=1, vocab=320, seed=0)
    return items, model, proc


def executed(verdict: str, n_checks: int = 2) -> str:
    """A verifier output that executes every check (one evidence line each), then the verdict."""
    lines = [f"{i}. check {i}: 1 (A 1, B 2) -> {verdict}" for i in range(1, n_checks + 1)]
    return "\n".join(lines + [f"verdict: {verdict}"])


def _script(items):
    good = [f"verdict: {it.pair.preferred}" for it in items]
    bad = ["verdict: B" if it.pair.preferred == "A" else "verdict: A" for it in items]
    vgood = [executed(it.pair.preferred) for it in items]
    vbad = [executed("B" if it.pair.preferred == "A" else "A") for it in items]
    return {
        # pair 0: 4 checklists, the 4th names a response (invalid); pair 1: all valid (2 checks each)
        "planner": [
            ["1. count the red shapes.\n2. check the final answer.",
             "- count the blue shapes\n- count the green shapes",
             "1. count the red shapes. 2. count the blue shapes.",
             "1. is Response A right?\n2. check the final answer."],
            ["1. count the red shapes.\n2. check the final answer."] * 4,
        ],
        # no-rubric verdicts: pair 0 right 1 of 3 (one is a format failure), pair 1 right 3 of 3
        "no_rubric": [[good[0], bad[0], "I cannot tell"], [good[1]] * 3],
        # guided verdicts: pair 0 right 2 of 3; pair 1 right 1 of 3
        "verifier": [[vgood[0], vgood[0], vbad[0]], [vgood[1], vbad[1], vbad[1]]],
        "static": [[good[0], bad[0]], [bad[1]]],
        # the reading judge: a worked reading, then the verdict; pair 0 right 1 of 2, pair 1 wrong
        "reading": [[f"red = 2. \\boxed{{2}}\n{good[0]}", f"red = 3. \\boxed{{3}}\n{bad[0]}"], [bad[1]]],
    }


def _cfg(**kw):
    base = dict(n_checklists=4, m_verdicts=3, k_no_rubric=3, guidance_lambda=0.4)
    base.update(kw)
    return DRTrainConfig(**base)


def test_rewards_and_episode_layout_hand_computed(setup):
    items, model, proc = setup
    cfg = _cfg()
    assert (cfg.planner_reward, cfg.guidance, cfg.judge) == ("improvement", "paired", "deltarubric")
    gen = ScriptedGen(proc.tokenizer, _script(items), [it.pair.question for it in items])
    ro = collect(gen, proc, items, cfg)
    # generation calls: planner N=4 per pair, no-rubric K=3 per pair, verifier M=3 per *valid* checklist (3 + 4)
    assert [c for c in gen.calls if c[0] == "planner"] == [("planner", 4, cfg.planner_max_tokens)] * 2
    assert [c for c in gen.calls if c[0] == "no_rubric"] == [("no_rubric", 3, cfg.verifier_max_tokens)] * 2
    assert [c for c in gen.calls if c[0] == "verifier"] == [("verifier", 3, cfg.verifier_max_tokens)] * 7
    eos = proc.tokenizer.convert_tokens_to_ids("<|im_end|>")
    episodes, m = score(ro, cfg, eos)
    plan = [e for e in episodes if e.role == "planner"]
    ver = [e for e in episodes if e.role == "verifier"]
    assert len(plan) == 8 and len(ver) == 21
    # pair 0: acc0 = 1/3, valid checklists acc_c = 2/3: they improve -> 1 + 1; the invalid one gets 0
    p0 = [e.reward for e in plan if e.group == f"{items[0].pair.id}/plan"]
    assert p0 == pytest.approx([2.0, 2.0, 2.0, 0.0])
    # pair 1: acc0 = 1, acc_c = 1/3: the checklists hurt -> 1 - 1
    p1 = [e.reward for e in plan if e.group == f"{items[1].pair.id}/plan"]
    assert p1 == pytest.approx([0.0] * 4)
    # verifier (paired): verdict m <-> no-rubric sample m. Pair 0's no-rubric correctness is [1, 0, 0]:
    # verdict 0 right, paired right -> 1; verdict 1 right, paired wrong -> 1.4; verdict 2 wrong -> 0
    v0 = [e.reward for e in ver if e.group == f"{items[0].pair.id}/c0"]
    assert v0 == pytest.approx([1.0, 1.4, 0.0])
    v1 = [e.reward for e in ver if e.group == f"{items[1].pair.id}/c2"]
    assert v1 == pytest.approx([1.0, 0.0, 0.0])
    assert not any(e.group == f"{items[0].pair.id}/c3" for e in ver)  # the invalid checklist is never executed
    # actions end with EOS (finished completions) and prompts carry the image
    assert all(e.actions[-1] == eos for e in episodes)
    assert all(len(e.prompt["images"]) == 1 for e in episodes)
    assert m["planner/format_violation"] == pytest.approx(1 / 8)
    assert m["no_rubric/accuracy"] == pytest.approx((1 / 3 + 1) / 2)
    assert m["no_rubric/format_violation"] == pytest.approx(1 / 6)
    assert m["verifier/accuracy"] == pytest.approx((3 * 2 + 4 * 1) / 21)
    assert m["verifier/bonus_rate"] == pytest.approx(3 / 21)  # pair 0's verdict 1 of each of its 3 checklists
    assert m["planner/gain_over_no_rubric"] == pytest.approx((3 * (2 / 3 - 1 / 3) + 4 * (1 / 3 - 1)) / 7)
    assert m["planner/improved"] == pytest.approx(3 / 7)
    # the precondition: pair 1's four checklists all earn 0 (a flat group), pair 0's do not; a checklist separates
    # when one of its checks names a claim the two responses disagree on (the invalid one separates nothing)
    assert m["planner/flat_groups"] == pytest.approx(1 / 2)
    assert [disagreement_keys(it.pair) for it in items] == [["blue"], ["green", "blue"]]
    # pair 0's 2nd (blue, green) and 3rd (red, blue) checklists name blue; pair 1's (red, answer) name neither
    assert m["planner/separating"] == pytest.approx(2 / 8)
    # relative against absolute: pair 0's rewards are 1 + 1 and 1 + 2/3 on its valid checklists and 0 on the invalid
    # one under both, a positive-affine map of each other (the same advantages after group scaling); pair 1 is flat
    # under both: no group where the choice of reward acts
    assert m["planner/relative_differs"] == 0.0
    # the readings kept for the ablations: shift 1 + acc_c - acc0, absolute 1 + acc_c; pair_rate 1 + lambda (1 - acc0)
    sh, _ = score(ro, _cfg(planner_reward="shift", guidance="pair_rate"), eos)
    assert [e.reward for e in sh if e.role == "planner"] == pytest.approx([4 / 3] * 3 + [0.0] + [1 / 3] * 4)
    assert [e.reward for e in sh if e.group == f"{items[0].pair.id}/c0"] == pytest.approx([1 + 0.4 * 2 / 3] * 2 + [0.0])
    episodes_abs, _ = score(ro, _cfg(planner_reward="absolute"), eos)
    pa = [e.reward for e in episodes_abs if e.role == "planner"]
    assert pa == pytest.approx([5 / 3, 5 / 3, 5 / 3, 0.0] + [4 / 3] * 4)


def test_rewards_do_not_pay_for_skipped_work(setup):
    """Adversarial outputs: an empty checklist, an off-topic one that changes nothing, a verifier that gives a right
    verdict without executing the checks (or only some of them)."""
    items, model, proc = setup
    eos = proc.tokenizer.convert_tokens_to_ids("<|im_end|>")
    it = items[:1]
    right = it[0].pair.preferred
    script = {
        "planner": [["", "1. count the red shapes.\n2. count the blue shapes.", "1. check the final answer.\n2. x."]],
        "no_rubric": [[f"verdict: {right}"] * 3],  # an easy pair: the judge is right without a checklist
        # checklist 1 (on topic): right verdicts, but the first is bare and the second skips a check;
        # checklist 2 (off topic): right verdicts executed in full
        "verifier": [[f"verdict: {right}", executed(right, 1), executed(right)]],
    }
    cfg = _cfg(n_checklists=3, m_verdicts=3, k_no_rubric=3)
    gen = ScriptedGen(proc.tokenizer, script, [it[0].pair.question])
    episodes, m = score(collect(gen, proc, it, cfg), cfg, eos)
    plan = [e.reward for e in episodes if e.role == "planner"]
    ver = [e.reward for e in episodes if e.role == "verifier" and e.group.endswith("/c1")]
    assert plan[0] == 0.0  # the empty checklist is malformed
    assert ver == [0.0, 0.0, 1.0]  # a bare verdict and a partly executed one are format failures
    assert m["verifier/format_violation"] == pytest.approx(4 / 6)
    # both valid checklists lead to acc_c 1/3 vs acc0 1 -> they hurt; relative pays an off-topic checklist on an
    # easy pair nothing above a malformed one, absolute pays it 1 + 1/3
    assert plan[1:] == [0.0, 0.0]
    abs_plan = [e.reward for e in score(collect(gen, proc, it, _cfg(planner_reward="absolute", n_checklists=3)),
                                        _cfg(planner_reward="absolute", n_checklists=3), eos)[0] if e.role == "planner"]
    assert abs_plan == pytest.approx([0.0, 4 / 3, 4 / 3])
    # here the two readings differ: relative is flat (nothing to learn), absolute ranks the valid checklists first
    assert m["planner/relative_differs"] == 1.0


@pytest.mark.parametrize("judge", ["no_rubric", "static", "reading"])
def test_single_step_judge_runs_train_that_mode_alone(setup, judge):
    """The paper's trained baselines and the reading judge: N*M verdicts per pair of one judge mode, reward =
    correctness, one group per pair, no planner or verifier episodes."""
    items, model, proc = setup
    cfg = _cfg(judge=judge, n_checklists=2, m_verdicts=2)
    gen = ScriptedGen(proc.tokenizer, _script(items), [it.pair.question for it in items])
    episodes, m = score(collect(gen, proc, items, cfg), cfg, proc.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    assert gen.calls == [(judge, 4, cfg.verifier_max_tokens)] * 2
    assert {e.role for e in episodes} == {judge} and len(episodes) == 8
    r0 = [e.reward for e in episodes if e.group == f"{items[0].pair.id}/{judge}"]
    if judge == "no_rubric":  # the script's no-rubric texts cycle [right, wrong, no verdict]
        assert r0 == [1.0, 0.0, 0.0, 1.0]
        assert m["no_rubric/format_violation"] == pytest.approx(1 / 8)
    else:  # static and reading cycle [right, wrong]
        assert r0 == [1.0, 0.0, 1.0, 0.0]
    if judge == "reading":  # its prompt asks for the reading and gives no checklist
        assert all("Read the image, then judge" in e.prompt["text"] and "Checks:" not in e.prompt["text"]
                   for e in episodes)
    assert m[f"{judge}/accuracy"] == pytest.approx(sum(e.reward for e in episodes) / 8)
    # pair 0's samples differ in reward, pair 1's are all right (no-rubric) or all wrong: one flat group of two
    assert [e.reward for e in episodes if e.group == f"{items[1].pair.id}/{judge}"] in ([1.0] * 4, [0.0] * 4)
    assert m[f"{judge}/flat_groups"] == 0.5


def _advantages_seen_by_updater(model, proc, episodes, monkeypatch, scale="batch"):
    """Run the real GRPOUpdater.update and capture the advantages it computed."""
    seen = {}

    def spy(rewards, group_ids, roles=None, scale="group", eps=1e-4):
        adv = grouped_advantages(rewards, group_ids, roles, scale, eps)
        seen["adv"], seen["roles"] = adv.clone(), list(roles)
        return adv

    monkeypatch.setattr(updater_mod, "grouped_advantages", spy)
    g = effective_grpo(_cfg()).model_copy(update={"scale_rewards": scale})
    state = {k: v.clone() for k, v in model.state_dict().items()}
    upd = GRPOUpdater(CausalLMAdapter(model, proc, 1.0), TorchEngine(model, g), g)
    metrics = upd.update(episodes)
    model.load_state_dict(state)  # keep the module-scoped model unchanged for the next call
    assert metrics["n_trained"] == len(episodes) and metrics["n_optimizer_steps"] == 1.0
    roles = seen["roles"]
    return (seen["adv"][[r == "planner" for r in roles]], seen["adv"][[r == "verifier" for r in roles]])


def _scaled(episodes, role, c):
    return [type(e)(e.prompt, e.actions, e.reward * c if e.role == role else e.reward, e.group, e.role, e.meta)
            for e in episodes]


def test_decoupled_advantages_through_the_updater(setup, monkeypatch):
    items, model, proc = setup
    cfg = _cfg()
    gen = ScriptedGen(proc.tokenizer, _script(items), [it.pair.question for it in items])
    eos = proc.tokenizer.convert_tokens_to_ids("<|im_end|>")
    episodes, _ = score(collect(gen, proc, items, cfg), cfg, eos)
    plan, ver = _advantages_seen_by_updater(model, proc, episodes, monkeypatch)
    assert plan.abs().sum() > 0 and ver.abs().sum() > 0  # both roles carry a learning signal
    # verifier rewards x 7: planner advantages unchanged (and verifier ones too: scale-free per role)
    plan7, ver7 = _advantages_seen_by_updater(model, proc, _scaled(episodes, "verifier", 7.0), monkeypatch)
    assert torch.allclose(plan7, plan, atol=1e-6)
    # planner rewards x 0.1: verifier advantages unchanged
    plan01, ver01 = _advantages_seen_by_updater(model, proc, _scaled(episodes, "planner", 0.1), monkeypatch)
    assert torch.allclose(ver01, ver, atol=1e-6)
    # a changed verifier reward rule (lambda) changes verifier rewards only: planner advantages unchanged
    episodes_l, _ = score(collect(gen, proc, items, _cfg(guidance_lambda=0.0)), _cfg(guidance_lambda=0.0), eos)
    assert ([e.reward for e in episodes_l if e.role == "verifier"]
            != [e.reward for e in episodes if e.role == "verifier"])
    plan_l, _ = _advantages_seen_by_updater(model, proc, episodes_l, monkeypatch)
    assert torch.allclose(plan_l, plan, atol=1e-6)


def test_coupled_normalisation_would_fail_the_decoupling_check(setup):
    """Control: with one batch std over both roles (no role keys), scaling verifier rewards moves the planner's
    advantages, so the test above can fail."""
    items, model, proc = setup
    cfg = _cfg()
    gen = ScriptedGen(proc.tokenizer, _script(items), [it.pair.question for it in items])
    eos = proc.tokenizer.convert_tokens_to_ids("<|im_end|>")
    episodes, _ = score(collect(gen, proc, items, cfg), cfg, eos)

    def coupled(eps):
        r = torch.tensor([e.reward for e in eps])
        adv = grouped_advantages(r, [e.group for e in eps], None, "batch")
        return adv[[e.role == "planner" for e in eps]]

    assert not torch.allclose(coupled(_scaled(episodes, "verifier", 7.0)), coupled(episodes), atol=1e-3)
    assert math.isfinite(float(coupled(episodes).sum()))
