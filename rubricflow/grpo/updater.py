"""``GRPOUpdater``: one GRPO update from a rollout batch of episodes, for any policy adapter and engine.

``update(episodes)``:

1. advantages per ``(role, group)``, normalised per role (``core.grouped_advantages``); episodes whose reward is
   missing (NaN) are counted and left out of the loss entirely (they carry no information, and counting their
   tokens would dilute everyone else's);
2. old log-probs once, without grad, when the batch is used for more than one optimizer step (several minibatches
   or inner epochs); for the on-policy single step they equal the current log-probs, so ``old = logp.detach()``
   saves a forward pass (the ratio is then exactly 1, as in TRL);
3. reference log-probs only when ``beta > 0`` (with ``beta == 0`` the reference module is never called);
4. ``inner_epochs`` passes over seeded shuffles of the batch, ``minibatch_size`` episodes per optimizer step,
   each minibatch split into micro-batches whose losses use the *minibatch's* normalisers, so their gradients sum
   exactly to the minibatch gradient whatever the micro-batch size.

Under several processes each rank updates on its own episodes (groups never span ranks) and the engine averages
gradients. The loss normalisers are the *global* minibatch's (sequences and tokens summed over ranks, divided by the
world size, so the averaged gradient is the global minibatch's), and every rank runs the same number of forwards,
backwards and optimizer steps: a rank with fewer trainable episodes, or none (all rewards missing), runs zero-loss
filler micro-batches, so it joins every collective (ZeRO-3 parameter all-gathers, gradient reductions) of the
others. Metrics are averaged over the ranks that report them.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict

import torch

from rubricflow.grpo.config import GRPOConfig
from rubricflow.grpo.core import grouped_advantages, grpo_loss
from rubricflow.grpo.engine import Engine
from rubricflow.grpo.types import Episode, PolicyAdapter, module_device


def _pad(rows: list[torch.Tensor], T: int) -> torch.Tensor:
    out = torch.zeros((len(rows), T), dtype=torch.float32)
    for i, r in enumerate(rows):
        n = min(T, r.numel())
        out[i, :n] = r[:n]
    return out


def _rewards(episodes: list[Episode]) -> torch.Tensor:
    return torch.tensor([float("nan") if e.reward is None else float(e.reward) for e in episodes], dtype=torch.float32)


def reward_stats(episodes: list[Episode], adv: torch.Tensor) -> dict[str, float]:
    """Per-role reward and advantage statistics (missing rewards excluded; counted in ``n_missing/<role>``)."""
    r = _rewards(episodes)
    out: dict[str, float] = {}
    by_role: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(episodes):
        by_role[e.role].append(i)
    for role, idx in by_role.items():
        ri = r[idx]
        valid = ~torch.isnan(ri)
        rv, av = ri[valid], adv[idx][valid]
        out[f"n_episodes/{role}"] = float(len(idx))
        out[f"n_missing/{role}"] = float((~valid).sum())
        out[f"reward_mean/{role}"] = float(rv.mean()) if rv.numel() else float("nan")
        out[f"reward_std/{role}"] = float(rv.std()) if rv.numel() > 1 else 0.0
        out[f"adv_mean/{role}"] = float(av.mean()) if av.numel() else 0.0
        out[f"adv_std/{role}"] = float(av.std()) if av.numel() > 1 else 0.0
        out[f"adv_abs_mean/{role}"] = float(av.abs().mean()) if av.numel() else 0.0
        groups: dict[str, list[float]] = defaultdict(list)
        for i in idx:
            if not math.isnan(float(r[i])):
                groups[episodes[i].group].append(float(r[i]))
        flat = [g for g in groups.values() if len(g) >= 2 and max(g) == min(g)]
        out[f"frac_zero_std_groups/{role}"] = len(flat) / max(len(groups), 1)
    return out


class GRPOUpdater:
    def __init__(
        self,
        adapter: PolicyAdapter,
        engine: Engine,
        cfg: GRPOConfig,
        ref_module: torch.nn.Module | None = None,
        log_entropy: bool = True,
    ):
        if cfg.beta > 0 and ref_module is None:
            raise ValueError("grpo.beta > 0 needs a frozen reference module (ref_module=...)")
        self.adapter = adapter
        self.engine = engine
        self.cfg = cfg
        self.ref_module = ref_module if cfg.beta > 0 else None
        if self.ref_module is not None:
            self.ref_module.eval().requires_grad_(False)
            dev = module_device(engine.module)
            if module_device(self.ref_module) != dev:
                self.ref_module.to(dev)  # the reference scores the policy's batches: it lives where the policy does
        self.log_entropy = log_entropy
        self.shuffle = torch.Generator().manual_seed(cfg.seed + 7919 * getattr(engine, "rank", 0))
        self.n_updates = 0
        self._filler: Episode | None = None  # an episode of this rank for zero-loss filler micro-batches

    # -- resumable state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"shuffle_rng": self.shuffle.get_state(), "n_updates": self.n_updates}

    def load_state_dict(self, state: dict) -> None:
        self.shuffle.set_state(state["shuffle_rng"])
        self.n_updates = int(state["n_updates"])

    # -- helpers -----------------------------------------------------------------------------------------------
    def _micro_size(self, mb: int) -> int:
        if self.cfg.micro_batch_size:
            return self.cfg.micro_batch_size
        gas = getattr(getattr(self.engine, "cfg", None), "gradient_accumulation_steps", 1) or 1
        return max(1, math.ceil(mb / gas))

    @torch.no_grad()
    def _score(self, module: torch.nn.Module, episodes: list[Episode], micro: int,
               n_forwards: int | None = None) -> list[torch.Tensor]:
        """Per-episode 1-D log-prob tensors (length = len(actions)), computed in micro-batches without grad;
        ``n_forwards``: run filler forwards up to this count (the most any rank runs, for ZeRO-3's all-gathers)."""
        out: list[torch.Tensor] = []
        n_run = 0
        for i in range(0, len(episodes), micro):
            chunk = episodes[i : i + micro]
            logp, mask = self.adapter.action_logprobs(module, chunk)[:2]
            n_run += 1
            for j, e in enumerate(chunk):
                out.append(logp[j, : len(e.actions)].detach().float().cpu())
        for _ in range(n_run, n_forwards or 0):
            self.adapter.action_logprobs(module, [self._filler])
        return out

    # -- the plan every rank follows ----------------------------------------------------------------------------
    def _global_plan(self, local: list[tuple[int, float, int]], n_score: int) -> tuple[list, int]:
        """Agree on the collective structure of this update across ranks.

        ``local``: this rank's optimizer steps as ``(n_seqs, n_tokens, n_micro)``; ``n_score``: its no-grad scoring
        forwards. Returns ``(steps, n_score)`` where ``steps[k] = (n_seqs, n_tokens, n_micro)`` holds the per-rank
        *normalisers* of step k (the global minibatch's sequences and tokens divided by the world size: the engine
        averages gradients over ranks, so the result is the global minibatch's loss gradient) and the most
        micro-batches any rank runs in it. Every rank then runs the same number of forwards, backwards and optimizer
        steps (filling with zero-loss micro-batches), so a rank with few or no trainable episodes (all rewards
        missing) still joins every all-gather and gradient reduction of the others.
        """
        world = getattr(self.engine, "world_size", 1)
        if world == 1:
            return local, n_score
        plans = self.engine.all_gather_object({"steps": local, "score": n_score})
        n_steps = max(len(p["steps"]) for p in plans)
        steps = []
        for k in range(n_steps):
            mine = [p["steps"][k] for p in plans if k < len(p["steps"])]
            steps.append((sum(m[0] for m in mine) / world, sum(m[1] for m in mine) / world, max(m[2] for m in mine)))
        return steps, max(p["score"] for p in plans)

    def _filler_loss(self, module: torch.nn.Module) -> None:
        """A zero-loss forward + backward on one of this rank's episodes: the collectives of a micro-batch, no
        gradient."""
        logp, mask = self.adapter.action_logprobs(module, [self._filler])[:2]
        self.engine.backward((logp * mask).sum() * 0.0)

    # -- the update --------------------------------------------------------------------------------------------
    def update(self, episodes: list[Episode]) -> dict[str, float]:
        t_start = time.perf_counter()
        cfg = self.cfg
        rewards = _rewards(episodes)
        adv_all = grouped_advantages(
            rewards, [e.group for e in episodes], [e.role for e in episodes], cfg.scale_rewards, cfg.adv_eps
        )
        metrics = reward_stats(episodes, adv_all)
        keep = [i for i, e in enumerate(episodes) if not math.isnan(float(rewards[i])) and len(e.actions) > 0]
        metrics["n_episodes"] = float(len(episodes))
        metrics["n_missing"] = float(torch.isnan(rewards).sum())
        metrics["n_trained"] = float(len(keep))
        metrics["completion_len_mean"] = (
            sum(len(e.actions) for e in episodes) / len(episodes) if episodes else 0.0
        )
        if episodes:
            self._filler = episodes[keep[0] if keep else 0]
        eps = [episodes[i] for i in keep]
        adv = adv_all[keep]
        n = len(eps)
        world = getattr(self.engine, "world_size", 1)
        if n == 0 and world == 1:
            metrics["skipped"] = 1.0
            metrics["update_time_s"] = time.perf_counter() - t_start
            return self.engine.all_reduce_mean(metrics)
        module = self.engine.module
        module.train()
        mb = min(cfg.minibatch_size or n, n) if n else 1
        micro = self._micro_size(mb)
        perms = [torch.randperm(n, generator=self.shuffle).tolist() for _ in range(cfg.inner_epochs)] if n else []
        minibatches = [perm[s : s + mb] for perm in perms for s in range(0, n, mb)]
        local = [(len(idx), float(sum(len(eps[i].actions) for i in idx)), math.ceil(len(idx) / micro))
                 for idx in minibatches]
        n_mb_local = math.ceil(n / mb) if n else 0
        steps, n_score = self._global_plan(local, math.ceil(n / micro) if n else 0)
        if not steps:  # no rank has a trainable episode: every rank skips alike
            metrics["skipped"] = 1.0
            metrics["update_time_s"] = time.perf_counter() - t_start
            return self.engine.all_reduce_mean(metrics)
        if n == 0 and not episodes:
            raise RuntimeError("GRPOUpdater.update: this rank has no episodes at all, so it cannot join the other "
                               "ranks' forwards (every rank must roll out at least one episode per step)")
        # old log-probs are needed when any rank takes more than one optimizer step on its batch
        need_old = cfg.inner_epochs > 1 or max(len(steps) // cfg.inner_epochs, n_mb_local) > 1
        old = self._score(module, eps, micro, n_score) if need_old else None
        ref = self._score(self.ref_module, eps, micro) if self.ref_module is not None else None

        sums: dict[str, float] = defaultdict(float)
        ratio_min, ratio_max = math.inf, -math.inf
        losses, norms, lrs = [], [], []
        tok_total = 0.0
        for k, (n_seqs, n_tokens, n_micro) in enumerate(steps):
            idx = minibatches[k] if k < len(minibatches) else []
            mb_loss = 0.0
            for m in range(n_micro):
                midx = idx[m * micro : (m + 1) * micro]
                if not midx:
                    self._filler_loss(module)
                    continue
                chunk = [eps[i] for i in midx]
                res = self.adapter.action_logprobs(module, chunk, with_entropy=self.log_entropy)
                logp, mask = res[0], res[1]
                ent = res[2] if self.log_entropy and len(res) > 2 else None
                T, dev = logp.shape[1], logp.device
                old_logp = _pad([old[i] for i in midx], T).to(dev) if old is not None else logp.detach()
                ref_logp = _pad([ref[i] for i in midx], T).to(dev) if ref is not None else None
                out = grpo_loss(
                    logp,
                    old_logp,
                    adv[midx].to(dev),
                    mask,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    beta=cfg.beta,
                    ref_logp=ref_logp,
                    loss_agg=cfg.loss_agg,
                    max_completion_length=cfg.max_new_tokens,
                    n_seqs=n_seqs,
                    n_tokens=n_tokens,
                    entropy=ent,
                )
                self.engine.backward(out.loss)
                mb_loss += float(out.loss.detach())
                st = out.stats
                w = st["n_tokens"]
                tok_total += w
                for key in ("clip_low_frac", "clip_high_frac", "ratio_mean", "kl", "entropy"):
                    if key in st:
                        sums[key] += st[key] * w
                ratio_min = min(ratio_min, st["ratio_min"])
                ratio_max = max(ratio_max, st["ratio_max"])
            step = self.engine.step()
            if idx:
                losses.append(mb_loss)
            norms.append(step["grad_norm"])
            lrs.append(step["lr"])
        self.n_updates += 1
        if losses:  # ranks that trained nothing this step leave their loss statistics out of the rank mean
            for key, v in sums.items():
                metrics[key] = v / max(tok_total, 1.0)
            metrics["clip_frac"] = metrics.get("clip_low_frac", 0.0) + metrics.get("clip_high_frac", 0.0)
            metrics["ratio_min"] = ratio_min
            metrics["ratio_max"] = ratio_max
            metrics["loss"] = sum(losses) / len(losses)
        metrics["grad_norm"] = sum(norms) / len(norms)
        metrics["lr"] = lrs[-1]
        metrics["n_optimizer_steps"] = float(len(steps))
        metrics["update_time_s"] = time.perf_counter() - t_start
        return self.engine.all_reduce_mean(metrics)
