"""GRPO math against hand-computed values."""

import math

import pytest
import torch

import rubricflow.grpo as grpo
from rubricflow.grpo.core import aggregate, clipped_surrogate, grpo_loss, kl_k3, token_entropy, token_logprobs

NAN = float("nan")


def approx(t, expected, tol=1e-4):
    return torch.allclose(torch.as_tensor(t, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                          atol=tol)


# ---------------------------------------------------------------------------------------------------------------
# advantages


def test_group_advantages_group_scale_hand_computed():
    # group 1: [1, 0, 1, 0] mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.577350
    # group 2: [2, 4, 6, 8] mean 5, sample std sqrt((9 + 1 + 1 + 9) / 3) = 2.581989
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    adv = grpo.group_advantages(r, 4, scale="group", eps=1e-4)
    a1 = 0.5 / (0.5773503 + 1e-4)
    s2 = 2.5819889 + 1e-4
    assert approx(adv, [a1, -a1, a1, -a1, -3 / s2, -1 / s2, 1 / s2, 3 / s2])


def test_group_advantages_batch_and_none():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    # batch sample std of all 8 values: mean 2.75, squared deviations sum
    # 3.0625*2+7.5625*2+0.5625+1.5625+10.5625+27.5625
    dev = [(x - 2.75) ** 2 for x in r.tolist()]
    bstd = math.sqrt(sum(dev) / 7) + 1e-4
    adv = grpo.group_advantages(r, 4, scale="batch")
    assert approx(adv, [0.5 / bstd, -0.5 / bstd, 0.5 / bstd, -0.5 / bstd, -3 / bstd, -1 / bstd, 1 / bstd, 3 / bstd])
    adv0 = grpo.group_advantages(r, 4, scale="none")
    assert approx(adv0, [0.5, -0.5, 0.5, -0.5, -3, -1, 1, 3])


def test_missing_rewards_are_excluded_not_zero():
    # group [1, NaN, 0, 0]: valid {1, 0, 0}, mean 1/3, sample std sqrt((4/9 + 1/9 + 1/9) / 2) = 0.57735
    r = torch.tensor([1.0, NAN, 0.0, 0.0])
    adv = grpo.group_advantages(r, 4, eps=0.0)
    s = math.sqrt((4 / 9 + 1 / 9 + 1 / 9) / 2)
    assert approx(adv, [(2 / 3) / s, 0.0, (-1 / 3) / s, (-1 / 3) / s])
    # if NaN had been read as 0 the mean would be 0.25 and the first advantage 0.75/0.5 = 1.5
    assert not approx(adv[0], 1.5, tol=1e-2)
    assert not torch.isnan(adv).any()


def test_singleton_and_one_valid_groups_get_zero():
    assert approx(grpo.group_advantages(torch.tensor([3.0, 5.0]), 1), [0.0, 0.0])
    assert approx(grpo.group_advantages(torch.tensor([NAN, 1.0, NAN]), 3), [0.0, 0.0, 0.0])
    assert approx(grpo.group_advantages(torch.tensor([NAN, NAN]), 2, scale="batch"), [0.0, 0.0])
    # all-equal group: centred rewards are 0 -> advantages 0 (std 0 + eps)
    assert approx(grpo.group_advantages(torch.tensor([1.0, 1.0, 1.0]), 3), [0.0, 0.0, 0.0])


def test_group_size_must_divide():
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        grpo.group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="scale"):
        grpo.group_advantages(torch.zeros(4), 2, scale="std")


def test_grouped_variable_groups_match_hand_values():
    # groups of size 3 and 2, interleaved order
    r = torch.tensor([1.0, 10.0, 2.0, 20.0, 3.0])
    g = ["a", "b", "a", "b", "a"]
    adv = grpo.grouped_advantages(r, g, scale="none")
    assert approx(adv, [-1.0, -5.0, 0.0, 5.0, 1.0])
    adv = grpo.grouped_advantages(r, g, scale="group", eps=0.0)
    assert approx(adv, [-1.0, -5 / math.sqrt(50), 0.0, 5 / math.sqrt(50), 1.0])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_roles_are_decoupled(scale):
    torch.manual_seed(0)
    n = 12
    r = torch.rand(n)
    groups = [f"p{i // 6}" for i in range(n)]  # the same prompt ids are shared by both roles
    roles = ["planner" if i % 2 == 0 else "verifier" for i in range(n)]
    base = grpo.grouped_advantages(r, groups, roles, scale)
    is_b = torch.tensor([x == "verifier" for x in roles])
    scaled_b = torch.where(is_b, r * 7.0 + 3.0, r)
    adv_b = grpo.grouped_advantages(scaled_b, groups, roles, scale)
    assert torch.allclose(adv_b[~is_b], base[~is_b])  # planner unchanged by verifier's rewards
    scaled_a = torch.where(~is_b, r * -2.0, r)
    adv_a = grpo.grouped_advantages(scaled_a, groups, roles, scale)
    assert torch.allclose(adv_a[is_b], base[is_b])  # and vice versa
    # and the roles really are separate groups: planner's advantages are those of its rewards alone
    only_a = grpo.grouped_advantages(r[~is_b], [g for g, b in zip(groups, is_b) if not b], None, scale)
    assert torch.allclose(base[~is_b], only_a)


# ---------------------------------------------------------------------------------------------------------------
# log-probs, entropy, KL, surrogate, aggregation


def test_token_logprobs_and_entropy():
    logits = torch.tensor([[[0.0, math.log(3.0)], [2.0, 2.0]]])  # probs [0.25, 0.75] and [0.5, 0.5]
    lp = token_logprobs(logits, torch.tensor([[1, 0]]))
    assert approx(lp, [[math.log(0.75), math.log(0.5)]])
    ent = token_entropy(logits)
    assert approx(ent, [[-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2)]])
    # temperature 2 halves the logits: probs of [0, log 3] / 2 -> [1, sqrt 3] / (1 + sqrt 3)
    lp2 = token_logprobs(logits, torch.tensor([[1, 0]]), temperature=2.0)
    assert approx(lp2[0, 0], math.log(math.sqrt(3) / (1 + math.sqrt(3))))


def test_kl_k3_hand_values():
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.2)])
    # d = ref - logp = log(0.5): exp(d) - d - 1 = 0.5 + log 2 - 1
    assert approx(kl_k3(logp, ref), [0.5 + math.log(2) - 1, 0.0])


def test_clipped_surrogate_low_high_clip():
    old = torch.zeros(1, 4)
    # ratios 0.5, 1.1, 1.5, 1.25
    logp = torch.log(torch.tensor([[0.5, 1.1, 1.5, 1.25]]))
    adv = torch.tensor([[-1.0, 1.0, 1.0, 1.0]])
    loss, ratio, low, high = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28)
    # t0: min(0.5*-1, 0.8*-1) = -0.8 -> loss 0.8 (clipped low); t1: 1.1 unclipped -> -1.1
    # t2: min(1.5, 1.28) = 1.28 -> -1.28 (clipped high); t3: 1.25 < 1.28 -> -1.25
    assert approx(loss, [[0.8, -1.1, -1.28, -1.25]])
    assert low.tolist() == [[True, False, False, False]]
    assert high.tolist() == [[False, False, True, False]]
    # with symmetric PPO clip 0.2, token 3 (ratio 1.25) is clipped too
    loss_sym, _, _, high_sym = clipped_surrogate(logp, old, adv, 0.2, 0.2)
    assert approx(loss_sym[0, 3], -1.2) and bool(high_sym[0, 3])
    # the clip only removes gradient where it binds: grad of token 1 is -adv * ratio, of token 2 is 0
    lp = logp.clone().requires_grad_(True)
    clipped_surrogate(lp, old, adv, 0.2, 0.28)[0].sum().backward()
    assert approx(lp.grad, [[0.0, -1.1, 0.0, -1.25]])


def test_aggregation_modes_hand_computed():
    tok = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert approx(aggregate(tok, mask, "grpo"), (2.0 + 4.0) / 2)  # seq means 2 and 4
    assert approx(aggregate(tok, mask, "dapo"), 10.0 / 4)  # 4 valid tokens
    assert approx(aggregate(tok, mask, "dr_grpo", max_completion_length=5), 10.0 / (5 * 2))
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(tok, mask, "dr_grpo")
    # micro-batch normalisers: the two halves sum to the whole
    for mode in ("grpo", "dapo", "dr_grpo"):
        whole = aggregate(tok, mask, mode, 5)
        halves = aggregate(tok[:1], mask[:1], mode, 5, n_seqs=2, n_tokens=4.0) + aggregate(
            tok[1:], mask[1:], mode, 5, n_seqs=2, n_tokens=4.0
        )
        assert approx(halves, float(whole))


def test_grpo_loss_stats_and_kl_term():
    old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]]))
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    ref = logp.clone()  # KL exactly 0
    out = grpo_loss(logp, old, adv, mask, 0.2, 0.28, beta=0.5, ref_logp=ref, loss_agg="dapo")
    # tokens: -1.28, -1.0, +0.8 (clipped low) -> sum -1.48 over 3 tokens
    assert approx(out.loss, -1.48 / 3)
    assert out.stats["clip_low_frac"] == pytest.approx(1 / 3)
    assert out.stats["clip_high_frac"] == pytest.approx(1 / 3)
    assert out.stats["kl"] == pytest.approx(0.0)
    assert out.stats["ratio_max"] == pytest.approx(1.5) and out.stats["ratio_min"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, adv, mask, beta=0.1)
    # a reference half as likely on token (0,1): KL term 0.5 * (0.5 + log 2 - 1) / 3 added to the dapo mean
    ref2 = ref.clone()
    ref2[0, 1] = math.log(0.5)
    out2 = grpo_loss(logp, old, adv, mask, 0.2, 0.28, beta=0.5, ref_logp=ref2, loss_agg="dapo")
    assert approx(out2.loss, -1.48 / 3 + 0.5 * (0.5 + math.log(2) - 1) / 3)
