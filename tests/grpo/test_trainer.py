"""GRPOTrainer loop mechanics in-process: hook order, eval cadence, checkpoint cadence and pruning, resume."""

import copy
import math

import torch

from rubricflow.grpo import CausalLMAdapter, Episode, GRPOConfig, GRPOUpdater, TorchEngine
from rubricflow.grpo.checkpoint import CheckpointManager
from rubricflow.testing.toy_task import build_toy_policy, chat_prompt, toy_prompts
from rubricflow.grpo.trainer import GRPOTrainer


class Counter:
    def __init__(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, s):
        self.n = s["n"]


_POLICY = {}


def make(tmp_path, steps=4):
    if not _POLICY:
        _POLICY["v"] = build_toy_policy("text", seed=0)
    model, tok = copy.deepcopy(_POLICY["v"][0]), _POLICY["v"][1]
    cfg = GRPOConfig(steps=steps, prompts_per_step=2, group_size=2, checkpoint_every=2, keep_checkpoints=1,
                     eval_every=3, lr=1e-2, max_new_tokens=4)
    up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg)
    counter, seen, logged, evals = Counter(), [], [], []

    def rollout(step, prompts):
        counter.n += 1
        seen.append((step, [p["id"] for p in prompts]))
        g = torch.Generator().manual_seed(step)
        eps = [Episode(chat_prompt(tok, p["question"]), torch.randint(3, 300, (3,), generator=g).tolist(),
                       float(k), p["id"]) for p in prompts for k in range(2)]
        return eps, {"rollout/x": float(step)}

    def eval_fn(step):
        evals.append(step)
        return {"acc": 0.5}

    tr = GRPOTrainer(up, toy_prompts(5), rollout, cfg, tmp_path / "ck", log_fn=lambda s, m: logged.append((s, m)),
                     stateful={"counter": counter}, eval_fn=eval_fn)
    return tr, model, counter, seen, logged, evals


def test_loop_hooks_eval_and_checkpoints(tmp_path):
    tr, model, counter, seen, logged, evals = make(tmp_path)
    out = tr.run()
    assert out["steps"] == 4 and out["resumed_from"] is None
    assert [s for s, _ in logged] == [0, 1, 2, 3] and counter.n == 4
    assert evals == [2, 3]  # after step 3 (eval_every=3) and after the last step
    assert "eval/acc" in logged[2][1] and "eval/acc" not in logged[1][1]
    m = logged[0][1]
    assert m["rollout/x"] == 0.0 and math.isfinite(m["loss"]) and m["step_time_s"] > 0 and m["step_cpu_s"] > 0
    # every prompt of the 5 is seen once in the first 2.5 steps (epoch order), batches of 2
    flat = [i for _, ids in seen for i in ids]
    assert sorted(flat[:5]) == [f"toy-{i:03d}" for i in range(5)]
    # checkpoints at steps 2 and 4, only the last kept
    assert [s for s, _ in CheckpointManager(tmp_path / "ck").checkpoints()] == [4]

    # a new trainer on the same directory resumes at step 4: nothing left to do for 4 steps, 2 more for 6
    tr2, model2, counter2, seen2, logged2, _ = make(tmp_path, steps=6)
    out2 = tr2.run()
    assert out2["resumed_from"] == 4 and [s for s, _ in logged2] == [4, 5]
    assert counter2.n == 4 + 2  # the stateful object came back from the checkpoint and went on
    # the prompt stream continues where it stopped (the uninterrupted order of a 6-step run)
    tr3, *_rest = make(tmp_path / "fresh", steps=6)
    seen3 = _rest[2]
    tr3.run()
    assert seen2 == seen3[4:]
