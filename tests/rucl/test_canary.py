"""The GRPO canary: a bandit reward that only pays a boxed "1" must move the sampled behaviour of the tiny warm-started
policy from its start to >= 0.8 within a few steps, through the real RuCL path (rollouts, the reward, the engine,
the optimizer). It catches sign, masking, EOS and optimizer bugs that a noisy real reward would hide."""

import dataclasses

from rubricflow.data.schema import read_dataset, write_dataset
from rubricflow.evaluation.heldout import evaluate_sampled
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.train import train_rucl
from rubricflow.sections import GenerationConfig


def test_a_bandit_reward_moves_the_sampled_behaviour_past_0_8(setup, tmp_path):
    from models.loader import load_policy

    root = setup
    # the same prompts, every gold answer "1": the outcome reward becomes "boxed 1 pays 1"
    bandit = tmp_path / "bandit"
    samples = [dataclasses.replace(s, answer="1", answer_type="int") for s in read_dataset(root / "data")]
    bandit.mkdir()
    (bandit / "images").symlink_to(root / "data" / "images", target_is_directory=True)
    write_dataset(bandit, samples)
    train = [s for s in samples if s.split == "train"][:8]
    gen = GenerationConfig(max_new_tokens=28)

    def rate(policy_dir) -> float:
        model, proc = load_policy(policy_dir)
        return evaluate_sampled(model, proc, bandit, train, gen, k=8, temperature=1.0, seed=0)["sampled_accuracy"]

    start = rate(root / "sft")
    rcfg = RuCLConfig.model_validate({
        "init_from": str(root / "sft"), "out_dir": str(tmp_path / "model"), "checkpoint_dir": str(tmp_path / "ck"),
        "eval_samples": 0, "reward": {"mode": "outcome"},
        "grpo": {"group_size": 8, "prompts_per_step": 8, "steps": 20, "max_new_tokens": 28, "lr": 2e-3,
                 "checkpoint_every": 0, "seed": 3},
    })
    out = train_rucl(rcfg, bandit, None, [], tmp_path / "reports", gen, seed=3)
    end = rate(tmp_path / "model")
    print(f"\nbandit canary: sampled rate of a boxed 1 {start:.3f} -> {end:.3f} in {out['steps']} steps")
    assert start < 0.6 and end >= 0.8
