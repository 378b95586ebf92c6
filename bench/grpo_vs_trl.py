"""GRPO training throughput: rubricflow's trainer vs TRL 1.16 ``GRPOTrainer``, measured in the same run.

Both train the same tiny Qwen2 (saved once, loaded fresh by each), on the same chat prompts, with the same group
size, prompts per step, completion length, sampling temperature, learning rate and reward function (the toy
task: fraction of completion tokens equal to the target token), with matching algorithm settings (beta 0, loss
"dapo", group-scaled advantages, clip 0.2, one optimizer step per generation batch, grad-norm clip 1.0) and one
torch thread. rubricflow runs twice: with its ``cached`` backend's rollouts (``models.generation.cached``, the
headline) and with ``models.generation.hf.TransformersGenerator`` (the same ``model.generate`` TRL uses), so the
two sources of the difference (rollout loop, update) are visible separately. A step is timed from the start of
generation to the end of the optimizer step (rubricflow:
``GRPOTrainer`` step; TRL: ``on_step_begin`` to ``on_step_end``); the first ``--warmup`` steps are dropped.
Throughput is samples per CPU-second of this (single-threaded) process, which other processes on a shared machine
do not distort; samples per wall-clock second are printed too. Rounds alternate the three runs; the ratio is the
median over rounds of rubricflow (CachedSampler) / TRL.

    .venv/bin/python bench/grpo_vs_trl.py [--steps 14 --warmup 4 --rounds 3]

Needs ``trl`` (``pip install torch==2.13.0 trl==1.16.0`` keeps the pinned CPU stack). Last line:
``grpo samples_per_s ratio=<rubricflow/trl>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RUBRICFLOW_THREADS", "1")

import rubricflow.util.env  # noqa: E402

rubricflow.util.env.configure_threads()

import torch  # noqa: E402


def load(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


def prompts_for(tok, n):
    from rubricflow.testing.toy_task import chat_prompt, toy_prompts

    return [{"id": p["id"], "prompt": chat_prompt(tok, p["question"])} for p in toy_prompts(n)]


def timed_rate(step_times: list[float], warmup: int, samples_per_step: int) -> float:
    kept = step_times[warmup:]
    return samples_per_step * len(kept) / sum(kept)


def rates(wall: list[float], cpu: list[float], warmup: int, n: int) -> dict[str, float]:
    return {"wall": timed_rate(wall, warmup, n), "cpu": timed_rate(cpu, warmup, n),
            "med_step_s": statistics.median(wall[warmup:])}


# ------------------------------------------------------------------------------------------------------------
def run_rubricflow(model_dir, a, seed, sampler="cached") -> tuple[dict, float]:
    from models.generation import GenRequest, make_generator
    from rubricflow.grpo import CausalLMAdapter, Episode, GRPOConfig, GRPOUpdater, TorchEngine
    from rubricflow.testing.toy_task import target_token_id, toy_reward
    from rubricflow.grpo.trainer import GRPOTrainer

    model, tok = load(model_dir)
    tid, eos = target_token_id(tok), tok.eos_token_id
    cfg = GRPOConfig(group_size=a.group_size, prompts_per_step=a.prompts_per_step, steps=a.steps, lr=a.lr,
                     clip_low=0.2, clip_high=0.2, beta=0.0, loss_agg="dapo", scale_rewards="group",
                     max_new_tokens=a.max_new_tokens, temperature=1.0, max_grad_norm=1.0, checkpoint_every=0,
                     seed=seed)
    engine = TorchEngine(model, cfg)
    gen = make_generator(sampler, model, tok, batch_size=a.group_size * a.prompts_per_step)
    upd = GRPOUpdater(CausalLMAdapter(model, tok, temperature=1.0), engine, cfg, log_entropy=True)

    def rollout(step, prompts):
        reqs = [GenRequest(p["prompt"]) for p in prompts]
        outs = gen.generate(reqs, n=cfg.group_size, max_new_tokens=cfg.max_new_tokens, temperature=1.0)
        eps = [Episode(r.prompt, c.token_ids + ([eos] if c.finished else []), toy_reward(c.token_ids, tid), p["id"])
               for p, r, cs in zip(prompts, reqs, outs) for c in cs]
        return eps, {"reward_mean": sum(e.reward for e in eps) / len(eps)}

    with tempfile.TemporaryDirectory() as ck:
        tr = GRPOTrainer(upd, prompts_for(tok, 64), rollout, cfg, ck)
        tr.run()
    reward = statistics.fmean(h["reward_mean"] for h in tr.history[-3:])
    wall, cpu = [h["step_time_s"] for h in tr.history], [h["step_cpu_s"] for h in tr.history]
    return rates(wall, cpu, a.warmup, a.group_size * a.prompts_per_step), reward


# ------------------------------------------------------------------------------------------------------------
def run_trl(model_dir, a, seed) -> tuple[dict, float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rubricflow.testing.toy_task import target_token_id, toy_reward

    model, tok = load(model_dir)
    tid, eos = target_token_id(tok), tok.eos_token_id
    rewards_seen: list[float] = []

    def reward_fn(completions, completion_ids, **kw):
        out = [toy_reward([t for t in ids if t != eos], tid) for ids in completion_ids]
        rewards_seen.extend(out)
        return out

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.wall, self.cpu, self._t = [], [], None

        def on_step_begin(self, args, state, control, **kw):
            self._t = (time.perf_counter(), time.process_time())

        def on_step_end(self, args, state, control, **kw):
            self.wall.append(time.perf_counter() - self._t[0])
            self.cpu.append(time.process_time() - self._t[1])
            if torch.get_num_threads() != 1:  # CPU time is comparable only at one torch thread
                raise RuntimeError(f"TRL changed torch threads to {torch.get_num_threads()}")

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
            logging_steps=10**6, max_steps=a.steps, learning_rate=a.lr, lr_scheduler_type="constant",
            warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, seed=seed, dataloader_num_workers=0,
            per_device_train_batch_size=a.group_size * a.prompts_per_step, gradient_accumulation_steps=1,
            num_generations=a.group_size, max_completion_length=a.max_new_tokens, temperature=1.0, top_p=1.0,
            beta=0.0, loss_type="dapo", scale_rewards="group", epsilon=0.2, num_iterations=1,
        )
        ds = Dataset.from_list([{"prompt": p["prompt"]} for p in prompts_for(tok, 64)])
        trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=cfg, train_dataset=ds,
                              processing_class=tok, callbacks=[timer])
        trainer.train()
    n = a.group_size * a.prompts_per_step
    reward = statistics.fmean(rewards_seen[-3 * n:])
    return rates(timer.wall, timer.cpu, a.warmup, n), reward


def main() -> None:
    ap = argparse.ArgumentParser(description="GRPO throughput, rubricflow vs TRL")
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-3)
    a = ap.parse_args()
    try:
        import trl
    except ImportError:
        sys.exit("bench/grpo_vs_trl.py needs the `trl` package: .venv/bin/pip install torch==2.13.0 trl==1.16.0")

    from models.tiny import save
    from rubricflow.testing.toy_task import build_toy_policy

    print(f"torch {torch.__version__}, trl {trl.__version__}, threads {torch.get_num_threads()}; "
          f"tiny Qwen2 hidden {a.hidden} x {a.layers} layers; {a.prompts_per_step} prompts x {a.group_size} "
          f"samples, <= {a.max_new_tokens} new tokens, {a.steps} steps ({a.warmup} warm-up dropped) "
          f"x {a.rounds} rounds")
    with tempfile.TemporaryDirectory() as d:
        model, tok = build_toy_policy("text", hidden=a.hidden, layers=a.layers, seed=0)
        save(model, tok, d)
        res: dict[str, list[dict]] = {"cached": [], "hf": [], "trl": []}
        for r in range(a.rounds):
            for key, fn in (("cached", lambda: run_rubricflow(d, a, r, "cached")),
                            ("hf", lambda: run_rubricflow(d, a, r, "transformers")),
                            ("trl", lambda: run_trl(d, a, r))):
                rate, reward = fn()
                res[key].append(rate)
                print(f"round {r} {NAMES[key]:<38} {rate['cpu']:6.1f} samples/CPU-s {rate['wall']:6.1f} samples/s "
                      f"(median step {rate['med_step_s']:.3f} s) final reward {reward:.3f}", flush=True)

    def med(key, kind):
        return statistics.median(x[kind] for x in res[key])

    for kind, label in (("cpu", "per CPU-second"), ("wall", "per wall-clock second")):
        print(f"samples {label} (median of {a.rounds}): " + ", ".join(f"{NAMES[k]} {med(k, kind):.1f}" for k in res))
    ratio = [c["cpu"] / t["cpu"] for c, t in zip(res["cached"], res["trl"])]
    ratio_hf = [c["cpu"] / t["cpu"] for c, t in zip(res["hf"], res["trl"])]
    wall_ratio = [c["wall"] / t["wall"] for c, t in zip(res["cached"], res["trl"])]
    print(f"ratio rubricflow/trl per round (CPU time): {[round(x, 2) for x in ratio]}; wall clock: "
          f"{[round(x, 2) for x in wall_ratio]}")
    print(f"ratio with TransformersGenerator rollouts (the same generate() TRL uses): "
          f"{statistics.median(ratio_hf):.2f}")
    print(f"grpo samples_per_s ratio={statistics.median(ratio):.2f}")


NAMES = {"cached": "rubricflow (CachedSampler rollouts)", "hf": "rubricflow (TransformersGenerator)",
         "trl": "trl GRPOTrainer"}


if __name__ == "__main__":
    main()
