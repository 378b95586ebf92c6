"""Rubricor and Judge (both tiny LMs) and their alternating optimisation on preference pairs.

Method: rejection-sampling fine-tuning (expert iteration), not RL (``roro.rubricor_judge.optimizer: rft``). Why:
the training signal is a pairwise ordering of two scores, available only after both trajectories of a pair are
judged; with tiny LMs, sampling K candidates, keeping the ones that order pairs correctly and fine-tuning on them
(with the shared SFT utility) optimises exactly that ordering, needs no value baseline or advantage normalisation
over a binary, very sparse reward, and costs one SFT pass per phase — affordable inside the CPU budget, where a GRPO
loop over hundreds of judge generations per step is not. It is the 0/1-reward special case of policy-gradient RL
(only the kept samples get a gradient, all with the same weight). Every kept target is re-rendered as canonical
JSON, so format never drifts.

Round 0 (``warm``): templated SFT with deliberately uninformative content (``prompts.random_rubric`` /
``noisy_judgments``): both LMs learn the output shapes, not what makes routing good.

Round r >= 1:

* **Judge phase** (rubrics fixed: the current Rubricor's greedy rubric per problem). For each training pair,
  sample K judgments of each trajectory; keep the highest-scoring judgment of the chosen trajectory and the
  lowest-scoring one of the rejected trajectory when they order the pair correctly; SFT the Judge on them.
* **Rubricor phase** (Judge fixed). For each training problem, sample K rubrics; the Judge scores the problem's
  paired trajectories under each; keep the rubric with the best pairwise accuracy (ties: larger mean score margin)
  when it orders at least one pair correctly; SFT the Rubricor on them.

A trajectory's process score (``process_scores``) is read in one of two ways (``score_mode``):

* ``sampled`` (default; the paper): ``samples`` judgments are sampled at ``temperature``, each is parsed (scores
  as numbers in [0, 1], verdicts as booleans) and scored by code, ``sum weight * score * 1[satisfied]``
  (``rubric.process_score``); the process score is their mean. Failed parses are left out; all failed = missing.
* ``expected`` (probability-weighted): one greedy judgment; each criterion counts ``weight * score *
  P(satisfied = true)``, with ``score`` the number the judgment wrote and ``P`` read from the Judge's next-token
  distribution at the verdict (``expected_scores``). It is the paper's formula in expectation over the verdicts
  only, with no sampling noise.

After warm start and after every phase, the pairwise accuracy is measured on the pairs of the val problems (rubrics
written greedily by the current Rubricor, scores from the current Judge), overall and per pair category (outcome,
cost, process; ``pairs.category``). A pair counts 1 when the chosen trajectory scores higher, 0.5 on a tie, 0 when
lower or when a score is missing. The Judge and Rubricor kept at the end (for the router's process reward) are those
of the phase with the best val accuracy (``select_on: val``; ``last`` keeps the last phase). Test pairs are never
read here: the kept Judge is measured on them by the final evaluation (``roro_eval``).
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rubricflow.methods.roro.routing import SLM, Trajectory
from rubricflow.methods.roro.pairs import Pair, category
from rubricflow.methods.roro.prompts import (
    FAMILIES,
    chat,
    judge_input,
    noisy_judgments,
    random_rubric,
    rubricor_input,
)
from rubricflow.methods.roro.rubric import (
    ParsedJudgment,
    ParsedRubric,
    parse_criterion_judgments,
    parse_rubric,
    render_judgment_json,
    render_rubric_json,
)

# ----------------------------------------------------------------------------------------------------------------
# A rubric LM (the Rubricor or the Judge): sampling + SFT


class RubricLM:
    """A tiny causal LM acting as the Rubricor or the Judge; greedy outputs are memoised until the next SFT."""

    def __init__(self, model, tokenizer, name: str, batch_size: int = 64, max_new_tokens: int = 96):
        from models.generation.hf import TransformersGenerator

        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.gen = TransformersGenerator(model, tokenizer, batch_size=batch_size)
        self.max_new_tokens = max_new_tokens
        self._greedy: dict[str, str] = {}
        self.n_generated = 0

    def generate(self, contents: list[str], n: int = 1, temperature: float = 0.0, seed: int | None = None) -> list[list[str]]:
        """``n`` completions per user message (greedy when temperature is 0)."""
        from models.generation import GenRequest

        prompts = [chat(self.tokenizer, c) for c in contents]
        if temperature <= 0:
            todo = list(dict.fromkeys(p for p in prompts if p not in self._greedy))
            if todo:
                outs = self.gen.generate([GenRequest(p) for p in todo], n=1, max_new_tokens=self.max_new_tokens,
                                         temperature=0.0)
                self.n_generated += len(todo)
                for p, o in zip(todo, outs):
                    self._greedy[p] = o[0].text
            return [[self._greedy[p]] * n for p in prompts]
        outs = self.gen.generate([GenRequest(p) for p in prompts], n=n, max_new_tokens=self.max_new_tokens,
                                 temperature=temperature, top_p=1.0, seed=seed)
        self.n_generated += len(prompts) * n
        return [[c.text for c in o] for o in outs]

    def sft(self, examples: list[tuple[str, str]], steps: int, batch_size: int, lr: float, seed: int) -> list[float]:
        from rubricflow.sft import SFTExample, train_sft

        self._greedy.clear()
        if not examples or steps <= 0:
            return []
        ex = [SFTExample(chat(self.tokenizer, c), t) for c, t in examples]
        return train_sft(self.model, self.tokenizer, ex, steps=steps, batch_size=batch_size, lr=lr,
                         warmup_steps=min(10, steps), seed=seed)

    def save(self, path: str | Path) -> Path:
        from models.tiny import save

        return save(self.model, self.tokenizer, path)


def build_rubric_lms(
    corpus: list[str], judge_cfg, rubricor_cfg, batch_size: int, seed: int
) -> tuple[RubricLM, RubricLM]:
    """The Judge and the Rubricor: fresh tiny Qwen2s with an offline tokenizer trained on ``corpus`` (plus the
    ``prompts.ADDED_TOKENS``), or pretrained models loaded from ``init``."""
    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.methods.roro.prompts import ADDED_TOKENS

    out = []
    for i, (name, rc) in enumerate((("judge", judge_cfg), ("rubricor", rubricor_cfg))):
        if rc.source == "pretrained":
            from models.loader import load_policy

            if not rc.init:
                raise ValueError(f"roro.rubricor_judge.{name}.init: a pretrained {name} needs a model id or directory")
            model, tok = load_policy(rc.init)
            out.append(RubricLM(model, tok, name, batch_size, rc.max_new_tokens))
            continue
        dims = TinyDims(hidden_size=rc.hidden_size, num_layers=rc.num_layers, num_heads=4, num_kv_heads=2,
                        vocab_size=rc.vocab_size, max_positions=1024)
        model, tok = build_tiny_text(corpus, dims, seed=seed + i)
        tok.add_tokens(ADDED_TOKENS)
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        out.append(RubricLM(model, tok, name, batch_size, rc.max_new_tokens))
    return out[0], out[1]


# ----------------------------------------------------------------------------------------------------------------
# Scoring helpers


@dataclass
class ProblemView:
    """What the Rubricor and the Judge know about a problem: its text and the SLM's uncertainty profile (all-SLM route)."""

    question: str
    slm_uncertainties: list[float]


def problem_views(trajectories: list[Trajectory]) -> dict[str, ProblemView]:
    """The view of each problem, from its all-SLM route (the ``all-slm`` policy's, or the enumerated route with no
    LRM call)."""
    views: dict[str, ProblemView] = {}
    for t in trajectories:
        if t.problem_id not in views and t.steps and all(s.writer == SLM for s in t.steps):
            views[t.problem_id] = ProblemView(t.question, [s.slm_uncertainty for s in t.steps])
    missing = sorted({t.problem_id for t in trajectories} - set(views))
    if missing:
        raise ValueError(f"no all-slm trajectory for problems {missing[:5]} (the Rubricor's input needs it)")
    return views


def write_rubrics(rubricor: RubricLM, views: dict[str, ProblemView], pids: list[str]) -> dict[str, ParsedRubric]:
    texts = rubricor.generate([rubricor_input(views[p].question, views[p].slm_uncertainties) for p in pids])
    return {p: parse_rubric(t[0]) for p, t in zip(pids, texts)}


def judge_scores(judge: RubricLM, items: list[tuple[str, list[dict], Trajectory]], n: int = 1,
                 temperature: float = 0.0, seed: int | None = None) -> list[list[ParsedJudgment]]:
    """Judgments (parsed, with process scores) of each (question, rubric, trajectory)."""
    if not items:
        return []
    texts = judge.generate([judge_input(q, r, t) for q, r, t in items], n=n, temperature=temperature, seed=seed)
    return [[parse_criterion_judgments(x, r) for x in row] for (q, r, t), row in zip(items, texts)]


def mean_score(row: list[ParsedJudgment]) -> float | None:
    """Mean process score of the parsed judgments of one trajectory (None when every one failed)."""
    vals = [j.score for j in row if j.score is not None]
    return sum(vals) / len(vals) if vals else None


def sampled_scores(judge: RubricLM, items: list[tuple[str, list[dict], Trajectory]], n: int, temperature: float,
                   seed: int) -> list[float | None]:
    """Expected process score per item: the mean over ``n`` sampled judgments (greedy when temperature is 0)."""
    return [mean_score(row) for row in judge_scores(judge, items, n=n, temperature=temperature, seed=seed)]


def criterion_expected(weight: float, score: float, p_true: float, p_false: float) -> float:
    """One criterion's share of the probability-weighted process score: ``weight * score * P(satisfied = true)``,
    with ``P`` renormalised over the two verdict tokens (``score`` is the number the judgment wrote)."""
    return weight * score * p_true / max(p_true + p_false, 1e-12)


@torch.no_grad()
def expected_scores(judge: RubricLM, items: list[tuple[str, list[dict], Trajectory]]) -> list[float | None]:
    """Probability-weighted process score per item (``score_mode: expected``), read off one teacher-forced pass.

    The greedy judgment is generated and parsed (a failed parse or a missing criterion: None, missing). Each
    criterion's ``score`` is the number it wrote (parsed in [0, 1]: ``0.25`` counts 0.25); its verdict is taken in
    expectation: the canonical JSON of the judgment is scored by the Judge and, at each ``satisfied`` slot, the
    next-token distribution gives ``P(true)`` against ``P(false)`` (first token of each word), conditioned on the
    greedy judgment before it. The score is ``sum weight * score * P(satisfied)`` (``criterion_expected``): the
    paper's formula in expectation over the verdicts. (The score itself is not taken in expectation: a number is
    several tokens, with no single next-token distribution over its value.)
    """
    from rubricflow.sft import encode_pairs

    if not items:
        return []
    tok = judge.tokenizer
    texts = [row[0] for row in judge.generate([judge_input(q, r, t) for q, r, t in items])]
    parsed = [parse_criterion_judgments(x, r) for x, (q, r, t) in zip(texts, items)]
    first = lambda w: tok(w, add_special_tokens=False)["input_ids"][0]  # noqa: E731
    t_id, f_id = first("true"), first("false")
    verdict_slot = tok(', "satisfied": ', add_special_tokens=False)["input_ids"][-1]
    out: list[float | None] = [None] * len(items)
    todo = [i for i, pj in enumerate(parsed) if not pj.failed and not pj.missing]
    model = judge.model
    for b in range(0, len(todo), judge.gen.batch_size):
        idx = todo[b : b + judge.gen.batch_size]
        prompts = [chat(tok, judge_input(*items[i])) for i in idx]
        targets = [tok(render_judgment_json(parsed[i].judgments), add_special_tokens=False)["input_ids"] for i in idx]
        batch = encode_pairs(tok, prompts, None, targets)
        comp = batch.pop("completion_mask")
        logp = torch.log_softmax(model(**batch).logits.float(), dim=-1)
        for row, i in enumerate(idx):
            pos = comp[row].nonzero().flatten().tolist()
            ids = batch["input_ids"][row].tolist()
            weights = {c["criterion"]: c["weight"] for c in items[i][1]}
            judged = parsed[i].judgments
            total, k = 0.0, 0
            for p in pos:
                if ids[p] == verdict_slot and k < len(judged):  # next token: first token of true / false
                    lp = logp[row, p]
                    j = judged[k]
                    total += criterion_expected(weights[j["criterion"]], j["score"], lp[t_id].exp().item(),
                                                lp[f_id].exp().item())
                    k += 1
            out[i] = total if k == len(judged) else None
    return out


def process_scores(judge: RubricLM, items: list[tuple[str, list[dict], Trajectory]], mode: str, samples: int,
                   temperature: float, seed: int) -> list[float | None]:
    """Process score per (question, rubric, trajectory) as ``mode`` says (module docstring): ``sampled`` or
    ``expected``."""
    if mode == "sampled":
        return sampled_scores(judge, items, samples, temperature, seed)
    if mode == "expected":
        return expected_scores(judge, items)
    raise ValueError(f"roro.rubricor_judge.score_mode: unknown mode {mode!r}; expected 'sampled' or 'expected'")


def pair_credit(s_chosen: float | None, s_rejected: float | None) -> float:
    """1 if the chosen trajectory scores higher, 0.5 on a tie, 0 if lower or a score is missing."""
    if s_chosen is None or s_rejected is None:
        return 0.0
    if s_chosen > s_rejected:
        return 1.0
    return 0.5 if s_chosen == s_rejected else 0.0


def pair_accuracy(pairs: list[Pair], trajectories: list[Trajectory], scores: dict[int, float | None]) -> dict[str, float]:
    """Pairwise accuracy (ties 0.5, a missing score 0) of ``scores`` (trajectory index -> score) on ``pairs``:
    overall (``pairwise_acc``), strict (ties 0), and per category (``acc_<category>``, with ``n_<category>``;
    ``acc_process`` pools both process categories)."""
    credits = [pair_credit(scores.get(p.chosen), scores.get(p.rejected)) for p in pairs]
    by_cat: dict[str, list[float]] = defaultdict(list)
    for p, c in zip(pairs, credits):
        cat = category(p, trajectories)
        by_cat[cat.replace("-", "_")].append(c)
        if cat.startswith("process"):
            by_cat["process"].append(c)
    out = {
        "pairwise_acc": sum(credits) / max(1, len(credits)),
        "strict_acc": sum(1.0 for c in credits if c == 1.0) / max(1, len(credits)),
        "n_pairs": float(len(pairs)),
    }
    for cat, cs in sorted(by_cat.items()):
        out[f"acc_{cat}"] = sum(cs) / len(cs)
        out[f"n_{cat}"] = float(len(cs))
    return out


def pairwise_accuracy(judge: RubricLM, rubrics: dict[str, ParsedRubric], views: dict[str, ProblemView],
                      trajectories: list[Trajectory], pairs: list[Pair], mode: str = "sampled", n: int = 4,
                      temperature: float = 1.0, seed: int = 0) -> dict[str, float]:
    """Judge scores under ``rubrics`` (``process_scores``); :func:`pair_accuracy` plus failure rates."""
    need = sorted({i for p in pairs for i in (p.chosen, p.rejected)
                   if not rubrics[trajectories[i].problem_id].failed})
    items = [(views[trajectories[i].problem_id].question, rubrics[trajectories[i].problem_id].criteria,
              trajectories[i]) for i in need]
    scores = dict(zip(need, process_scores(judge, items, mode, n, temperature, seed)))
    n_fail = sum(1 for i in need if scores[i] is None)
    return {
        **pair_accuracy(pairs, trajectories, scores),
        "judge_failed_frac": n_fail / max(1, len(need)),
        "rubric_failed_frac": sum(1 for r in rubrics.values() if r.failed) / max(1, len(rubrics)),
    }


# ----------------------------------------------------------------------------------------------------------------
# Warm start


def warm_start_examples(views: dict[str, ProblemView], trajectories: list[Trajectory], rng: random.Random,
                        per_problem: int = 4, label_noise: float = 0.5) -> tuple[list, list]:
    """(rubricor examples, judge examples): random rubrics; Judge labels flipped with probability ``label_noise``."""
    rub, jud = [], []
    for pid, v in views.items():
        for _ in range(per_problem):
            r = random_rubric(rng, len(v.slm_uncertainties))
            rub.append((rubricor_input(v.question, v.slm_uncertainties), render_rubric_json(r)))
    for t in trajectories:
        v = views[t.problem_id]
        r = random_rubric(rng, len(v.slm_uncertainties))
        jud.append((judge_input(v.question, r, t), render_judgment_json(noisy_judgments(rng, r, t, label_noise))))
    return rub, jud


def routing_tokenizer_corpus(views: dict[str, ProblemView], trajectories: list[Trajectory], seed: int) -> list[str]:
    """Chat markers plus the Rubricor and Judge warm-start texts built from these routing trajectories (the tiny
    Judge and Rubricor tokenizers are trained on it)."""
    rng = random.Random(seed)
    rub, jud = warm_start_examples(views, trajectories, rng, per_problem=2)
    chat_marks = ["<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"] * 20
    return chat_marks + [c + "\n" + t for c, t in rub + jud]


# ----------------------------------------------------------------------------------------------------------------
# The alternation


def judge_phase(judge: RubricLM, rubrics: dict[str, ParsedRubric], views: dict[str, ProblemView],
                trajectories: list[Trajectory], pairs: list[Pair], cfg, seed: int) -> dict[str, float]:
    """Rejection sampling over judgments with the rubrics fixed; SFT the Judge on the kept ones."""
    usable = [p for p in pairs if not rubrics[p.problem_id].failed]
    need = sorted({i for p in usable for i in (p.chosen, p.rejected)})
    items = [(views[trajectories[i].problem_id].question, rubrics[trajectories[i].problem_id].criteria,
              trajectories[i]) for i in need]
    cands = dict(zip(need, judge_scores(judge, items, n=cfg.samples, temperature=cfg.temperature, seed=seed)))

    def complete(pj: ParsedJudgment) -> bool:
        return not pj.failed and not pj.missing

    # A trajectory is chosen in some pairs and rejected in others: its target is decided by its net record
    # (wins - losses), so no trajectory gets contradictory targets. Winners get their highest-scoring candidate,
    # losers their lowest; a selected candidate is kept when it orders the majority of the trajectory's pairs
    # correctly against the partners' selected candidates.
    net: dict[int, int] = defaultdict(int)
    for p in usable:
        net[p.chosen] += 1
        net[p.rejected] -= 1
    picked: dict[int, ParsedJudgment] = {}
    for i, v in net.items():
        good = [c for c in cands[i] if complete(c)]
        if v and good:
            picked[i] = max(good, key=lambda c: c.score) if v > 0 else min(good, key=lambda c: c.score)
    right: dict[int, list[bool]] = defaultdict(list)
    for p in usable:
        if p.chosen in picked and p.rejected in picked:
            ok = picked[p.chosen].score > picked[p.rejected].score
            right[p.chosen].append(ok)
            right[p.rejected].append(ok)
    examples = []
    for i, oks in right.items():
        if sum(oks) * 2 > len(oks):
            t = trajectories[i]
            examples.append((judge_input(views[t.problem_id].question, rubrics[t.problem_id].criteria, t),
                             render_judgment_json(picked[i].judgments)))
    n_kept = sum(1 for p in usable if p.chosen in picked and p.rejected in picked
                 and picked[p.chosen].score > picked[p.rejected].score)
    n_cand = sum(len(v) for v in cands.values())
    losses = judge.sft(examples, cfg.rft_steps, cfg.batch_size, cfg.rft_lr, seed)
    return {
        "ordered_pairs": float(n_kept),
        "kept_trajectories": float(len(examples)),
        "usable_pairs": float(len(usable)),
        "candidate_failed_frac": sum(1 for v in cands.values() for c in v if c.failed) / max(1, n_cand),
        "sft_loss_last": losses[-1] if losses else float("nan"),
    }


def warm_style_weights(criteria: list[dict]) -> list[dict]:
    """Parsed (normalised) weights back to the warm-start style, one decimal with the largest at 0.9, so that the
    Rubricor's training targets keep one weight format."""
    top = max(c["weight"] for c in criteria)
    return [{**c, "weight": round(0.9 * c["weight"] / top, 1) if top > 0 else 0.0} for c in criteria]


def rubricor_phase(rubricor: RubricLM, judge: RubricLM, views: dict[str, ProblemView], trajectories: list[Trajectory],
                   pairs: list[Pair], cfg, seed: int, n_problems: int, score_samples: int,
                   score_temperature: float, fixed_families: bool = True,
                   score_mode: str = "sampled") -> dict[str, float]:
    """Rejection sampling over rubrics with the Judge fixed; SFT the Rubricor on each problem's best rubric
    (``n_problems`` training problems per phase, drawn with ``seed``)."""
    by_pid: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        by_pid[p.problem_id].append(p)
    pids = sorted(by_pid)
    if n_problems < len(pids):
        pids = sorted(random.Random(seed).sample(pids, n_problems))
    texts = rubricor.generate([rubricor_input(views[p].question, views[p].slm_uncertainties) for p in pids],
                              n=cfg.samples, temperature=cfg.temperature, seed=seed)
    cands = {pid: [parse_rubric(x) for x in row] for pid, row in zip(pids, texts)}
    if fixed_families:  # the tiny Judge reads the fixed family list: a rubric that drops or repeats one is unusable
        names = [n for n, _ in FAMILIES]
        for pid in pids:
            cands[pid] = [r if [c["criterion"] for c in r.criteria] == names else ParsedRubric("failed", reason="not the family list", raw=r.raw)
                          for r in cands[pid]]
    # one batched Judge call over every (candidate rubric, paired trajectory)
    items, keys = [], []
    for pid in pids:
        idx = sorted({i for p in by_pid[pid] for i in (p.chosen, p.rejected)})
        for ci, r in enumerate(cands[pid]):
            if r.failed:
                continue
            for i in idx:
                items.append((views[pid].question, r.criteria, trajectories[i]))
                keys.append((pid, ci, i))
    scores = dict(zip(keys, process_scores(judge, items, score_mode, score_samples, score_temperature, seed)))
    examples, accs = [], []
    for pid in pids:
        best = None
        for ci, r in enumerate(cands[pid]):
            if r.failed:
                continue
            credits, margins = [], []
            for p in by_pid[pid]:
                sc, sr = scores.get((pid, ci, p.chosen)), scores.get((pid, ci, p.rejected))
                credits.append(pair_credit(sc, sr))
                margins.append((sc - sr) if sc is not None and sr is not None else -1.0)
            key = (sum(credits) / len(credits), sum(margins) / len(margins))
            if best is None or key > best[0]:
                best = (key, r)
        if best is not None and best[0][0] > 0:
            accs.append(best[0][0])
            examples.append((rubricor_input(views[pid].question, views[pid].slm_uncertainties),
                             render_rubric_json(warm_style_weights(best[1].criteria))))
    n_cand = sum(len(v) for v in cands.values())
    losses = rubricor.sft(examples, cfg.rft_steps, cfg.batch_size, cfg.rft_lr, seed)
    return {
        "kept_problems": float(len(examples)),
        "problems": float(len(pids)),
        "kept_train_acc_mean": sum(accs) / len(accs) if accs else float("nan"),
        "candidate_failed_frac": sum(1 for v in cands.values() for c in v if c.failed) / max(1, n_cand),
        "sft_loss_last": losses[-1] if losses else float("nan"),
    }


def select_phase(rows: list[dict], select_on: str = "val") -> int:
    """Index of the phase to keep: the best val pairwise accuracy (``val``; ties: the earliest) or the last."""
    if not rows:
        raise ValueError("select_phase: no phases")
    if select_on == "last":
        return len(rows) - 1
    if select_on == "val":
        return max(range(len(rows)), key=lambda i: (rows[i]["val_pairwise_acc"], -i))
    raise ValueError(f"roro.rubricor_judge.select_on: unknown rule {select_on!r}; expected 'val' or 'last'")


def alternate(
    judge: RubricLM,
    rubricor: RubricLM,
    rj_cfg,
    trajectories: list[Trajectory],
    train_pairs: list[Pair],
    val_pairs: list[Pair],
    log: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Warm start + ``rj_cfg.rounds`` rounds; returns one row per phase with the val pairwise accuracy (overall and
    per pair category, ``val_*``); the phase :func:`select_phase` picks is loaded back into both LMs and marked
    ``selected``."""
    views = problem_views(trajectories)
    split_of = {t.problem_id: t.split for t in trajectories}
    for name, pairs, want in (("train_pairs", train_pairs, "train"), ("val_pairs", val_pairs, "val")):
        wrong = sorted({split_of[p.problem_id] for p in pairs} - {want})
        if wrong:  # training reads train pairs, selection val pairs; never test
            raise ValueError(f"alternate: {name} must be pairs of {want} problems, got problems of split {wrong}")
    train_pids = sorted({p.problem_id for p in train_pairs})
    val_pids = sorted({p.problem_id for p in val_pairs})
    rng = random.Random(rj_cfg.seed)
    train_trajs = [t for t in trajectories if t.problem_id in set(train_pids)]
    rub_ex, jud_ex = warm_start_examples({p: views[p] for p in train_pids}, train_trajs, rng,
                                         label_noise=rj_cfg.warm_label_noise)
    torch.manual_seed(rj_cfg.seed)
    rubricor.sft(rub_ex, rj_cfg.rubricor.warm_steps, rj_cfg.rubricor.batch_size, rj_cfg.rubricor.lr, rj_cfg.seed)
    judge.sft(jud_ex, rj_cfg.judge.warm_steps, rj_cfg.judge.batch_size, rj_cfg.judge.lr, rj_cfg.seed)

    rows: list[dict] = []
    states: list[tuple[dict, dict]] = []
    clock = [time.perf_counter()]

    def evaluate(round_: int, phase: str, extra: dict) -> None:
        val_rubrics = write_rubrics(rubricor, views, val_pids)
        held = pairwise_accuracy(judge, val_rubrics, views, trajectories, val_pairs, rj_cfg.score_mode,
                                 rj_cfg.score_samples, rj_cfg.score_temperature, rj_cfg.seed + 7)
        row = {"round": round_, "phase": phase, **{f"val_{k}": v for k, v in held.items()},
               **{f"{phase}_{k}": v for k, v in extra.items()}, "phase_s": time.perf_counter() - clock[0]}
        states.append(({k: v.detach().clone() for k, v in judge.model.state_dict().items()},
                       {k: v.detach().clone() for k, v in rubricor.model.state_dict().items()}))
        rows.append(row)
        clock[0] = time.perf_counter()
        if log is not None:
            log(row)

    evaluate(0, "warm", {})
    for r in range(1, rj_cfg.rounds + 1):
        rubrics = write_rubrics(rubricor, views, train_pids)
        jm = judge_phase(judge, rubrics, views, trajectories, train_pairs, rj_cfg.judge, rj_cfg.seed + 100 * r)
        evaluate(r, "judge", jm)
        rm = rubricor_phase(rubricor, judge, views, trajectories, train_pairs, rj_cfg.rubricor,
                            rj_cfg.seed + 100 * r + 1, rj_cfg.rubricor_problems, rj_cfg.score_samples,
                            rj_cfg.score_temperature, rj_cfg.fixed_families, rj_cfg.score_mode)
        evaluate(r, "rubricor", rm)
    keep = select_phase(rows, rj_cfg.select_on)  # chosen on val pairs; test pairs are never read here
    judge.model.load_state_dict(states[keep][0])
    rubricor.model.load_state_dict(states[keep][1])
    judge._greedy.clear()
    rubricor._greedy.clear()
    for i, row in enumerate(rows):
        row["selected"] = i == keep
    return rows


def save_rubrics(path: str | Path, rubrics: dict[str, ParsedRubric]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for pid in sorted(rubrics):
            r = rubrics[pid]
            f.write(json.dumps({"problem_id": pid, "status": r.status, "criteria": r.criteria, "reason": r.reason,
                                "raw": r.raw}) + "\n")
    return path


def load_rubrics(path: str | Path) -> dict[str, ParsedRubric]:
    out = {}
    with Path(path).open() as f:
        for lineno, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                out[row["problem_id"]] = ParsedRubric(row["status"], row["criteria"], row.get("reason"), row.get("raw"))
            except (ValueError, KeyError) as e:
                raise ValueError(f"{path}:{lineno}: not a rubric row ({e})") from None
    return out
