"""The step models (``roro_models``): the small (SLM) and the large (LRM) model that write one solution step at a
time, built as tiny Qwen2s and fine-tuned on step-by-step solutions (or real models named by path, or the scripted
models of the long-chain environment, ``env.scripted``); loading them back, and the routing environment over the two
(``make_env``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from models.loader import load_policy
from models.tiny import TinyDims, build_tiny_text, save
from rubricflow.methods.roro.config import RoRoConfig, StepModelConfig
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.env.routing import RoutingEnv, StepCache, model_fingerprint
from rubricflow.methods.roro.env.scripted import ScriptedStepModel
from rubricflow.methods.roro.env.step_lm import (
    INSTRUCTION,
    TransformersStepModel,
    VLLMStepModel,
    prefix_text,
    solution_prompt,
)
from rubricflow.methods.roro.env.task import Problem, check_step
from rubricflow.sections import SFTSchedule
from rubricflow.training.sft import SFTExample, train_sft


def _step_corpus(sft: list[Problem]) -> list[str]:
    marks = ["<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"] * 50
    return marks + [f"{p.question}\n{INSTRUCTION}\n" + "\n".join(p.reference_steps) for p in sft[:1000]]


def train_step_model(spec: StepModelConfig, sft: list[Problem], val: list[Problem], corpus: list[str], name: str,
                     rc: RoRoConfig, seed: int) -> dict:
    """Build + SFT a tiny step model and save it to ``spec.path``.

    Schedule: ``sft_steps`` at ``lr``; then, while the gold-prefix step accuracy on ``val`` is below
    ``target_step_acc``, blocks of ``extra_block`` steps at lr / 2 (at most ``max_extra_steps``); then
    ``sft_decay_steps`` at lr / 4. Tiny transformers learn the step lookup and the arithmetic in sudden phase
    changes whose timing varies with the seed; the extra blocks make the strength of the trained model (what
    matters for routing) far less seed-dependent than a fixed step count.
    """
    t0 = time.perf_counter()
    dims = TinyDims(hidden_size=spec.hidden_size, num_layers=spec.num_layers, num_heads=spec.num_heads,
                    num_kv_heads=spec.num_kv_heads, vocab_size=spec.vocab_size, max_positions=512)
    model, tok = build_tiny_text(corpus, dims, seed=seed)
    ex = [SFTExample(solution_prompt(tok, p.question), "\n".join(p.reference_steps)) for p in sft]

    def acc() -> float:
        sm = TransformersStepModel(model, tok, name, rc.steps.max_step_tokens, rc.steps.uncertainty,
                                   rc.steps.batch_size)
        return gold_prefix_step_accuracy(sm, val)

    def phase(steps: int, lr: float, k: int) -> list[float]:
        phase_settings = SFTSchedule(steps=steps, batch_size=spec.batch_size, lr=lr, schedule="constant",
                                     warmup_steps=min(spec.warmup_steps, steps) if k == 0 else 0)
        out = train_sft(model, tok, ex, phase_settings, seed=seed + k)
        model.eval()
        return out

    losses = phase(spec.sft_steps, spec.lr, 0)
    extra, trace = 0, []
    if spec.target_step_acc > 0:
        a = acc()
        trace.append(a)
        while a < spec.target_step_acc and extra + spec.extra_block <= spec.max_extra_steps:
            losses += phase(spec.extra_block, spec.lr / 2, 1 + extra // spec.extra_block)
            extra += spec.extra_block
            a = acc()
            trace.append(a)
    if spec.sft_decay_steps:
        losses += phase(spec.sft_decay_steps, spec.lr / 4, 1000)
    save(model, tok, spec.path)
    return {"params": sum(p.numel() for p in model.parameters()),
            "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
            "extra_steps": extra, "steps": len(losses), "acc_trace": trace, "train_s": time.perf_counter() - t0}


def load_step_model(spec: StepModelConfig, name: str, rc: RoRoConfig):
    """A StepModel for ``spec`` (transformers or vLLM) and its cache fingerprint."""
    if spec.source == "scripted":
        m = ScriptedStepModel(rc.scripted, name, spec.n_params)
        return m, m.fingerprint
    if spec.backend == "vllm":
        m = VLLMStepModel(spec.path, name, spec.n_params, max_step_tokens=rc.steps.max_step_tokens,
                          uncertainty=rc.steps.uncertainty, gpu_memory_utilization=spec.gpu_memory_utilization)
        return m, model_fingerprint(name, spec.path)
    if spec.source == "tiny" and not (Path(spec.path) / "config.json").exists():
        raise FileNotFoundError(f"roro.{name}.path={spec.path}: no trained {name.upper()} here; "
                                "run `rubricflow roro-models`")
    model, tok = load_policy(spec.path)
    m = TransformersStepModel(model, tok, name, rc.steps.max_step_tokens, rc.steps.uncertainty, rc.steps.batch_size)
    return m, model_fingerprint(name, spec.path)


def gold_prefix_step_accuracy(step_model, probs: list[Problem]) -> float:
    """Fraction of steps a model gets locally right when continuing the *gold* prefix."""
    prefixes, meta = [], []
    for p in probs:
        pr = step_model.prompt(p.question)
        vals = [p.start] + p.true_values()
        for k in range(p.n_steps):
            prefixes.append(prefix_text(pr, p.reference_steps[:k]))
            meta.append((p, k, vals[k]))
    outs = step_model.propose(prefixes)
    ok = [bool(check_step(p, k, o.text, carried).correct) for (p, k, carried), o in zip(meta, outs)]
    return sum(ok) / max(1, len(ok))


def run_models(rc: RoRoConfig, log: Callable[[str, dict], None] | None = None) -> dict:
    """Train the SLM (seed ``rc.seed``) and the LRM (``rc.seed + 1``) that are tiny; a pretrained one is used as
    it is. Each one's gold-prefix step accuracy on the val problems is measured after training."""
    probs = problems(rc)
    corpus = _step_corpus(probs["sft"])
    out: dict = {"n_sft_problems": len(probs["sft"])}
    for name, spec, seed in (("slm", rc.slm, rc.seed), ("lrm", rc.lrm, rc.seed + 1)):
        if spec.source == "scripted":  # the long-chain environment: set by roro.scripted, nothing to train
            out[f"{name}_source"] = "scripted"
            continue
        if spec.source != "tiny":
            out[f"{name}_source"] = spec.path  # a pretrained model: nothing to train here
            continue
        torch.manual_seed(seed)
        m = train_step_model(spec, probs["sft"], probs["val"], corpus, name, rc, seed)
        sm, _ = load_step_model(spec, name, rc)
        m["val_step_acc"] = gold_prefix_step_accuracy(sm, probs["val"])
        out.update({f"{name}_{k}": v for k, v in m.items()})
        if log:
            log("models", {f"{name}_{k}": v for k, v in m.items()})
    return out


def make_env(rc: RoRoConfig, cache_path: str | Path | None = None) -> RoutingEnv:
    """The routing environment over the two step models (``roro.steps``: step cap and router features), with the
    saved step cache at ``cache_path`` loaded when it exists."""
    slm, slm_fp = load_step_model(rc.slm, "slm", rc)
    lrm, lrm_fp = load_step_model(rc.lrm, "lrm", rc)
    cache = StepCache()
    if cache_path is not None and Path(cache_path).exists():
        cache.load(cache_path)
    return RoutingEnv(slm, lrm, slm_fp, lrm_fp, rc.steps.max_steps, rc.steps.token_norm, rc.steps.step_norm, cache,
                      rc.steps.fifth_feature)
