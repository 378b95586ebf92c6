"""The copy probe on its own one-token-per-word vocabulary (a development version of ``bench/copy_probe.py``).

Two responses state values 1-8 for keys C..L in the prompt; the target copies both responses' values for 2-4 checked
keys (``A D = 7, B D = 3`` in the pairs' spelling, ``--fmt base``). A raw 2-layer Qwen2 (``--layers``, ``--hidden``,
``--heads``, ``--kv``) trains on it in cosine blocks (``--block``) with fresh AdamW moments, like the warm start, and
prints per block the held-out teacher-forced value accuracy of A and B and ``Bdiff``: both right where A != B.
``--pre N --prevar 1`` first trains N steps on the induction task (a random sequence, a separator, two of its
tokens from a random start; copy the six that follow), the task ``rubricflow.training.induction`` implements for the
warm start. Other levers: ``--fmt tagged|adj|tagadj|tagsep|table``, ``--wval`` (value-token loss weight),
``--ndiff`` (keys off per response), ``--dense`` / ``--indep`` (every key checked; independent A and B),
``--nkeys``, ``--theta`` (RoPE base). The runs docs/deltarubric_planning.md cites are in
docs/bench/copy_probe_tokens-epyc2.txt.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/copy_probe_tokens.py --steps 3000 --pre 2000 --prevar 1 --seed 0
"""

import random
import math
import time
import argparse
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=2)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--kv", type=int, default=2)
p.add_argument("--hidden", type=int, default=64)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--steps", type=int, default=3000)
p.add_argument("--bs", type=int, default=16)
p.add_argument("--block", type=int, default=200)
p.add_argument("--fmt", default="base")
p.add_argument("--ndiff", default="1,4")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--wval", type=float, default=1.0)
p.add_argument("--npairs", type=int, default=3000)
p.add_argument("--dense", type=int, default=0)
p.add_argument("--pre", type=int, default=0)
p.add_argument("--prevar", type=int, default=0)
p.add_argument("--prelen", type=int, default=24)
p.add_argument("--theta", type=float, default=10000.0)
p.add_argument("--nkeys", type=int, default=10)
p.add_argument("--indep", type=int, default=0)
p.add_argument("--clip", type=float, default=0.0)
a = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(a.seed)
KEYS = list("CDEFGHIJKL")[: a.nkeys]
VALS = [str(i) for i in range(1, 9)]
words = (
    KEYS
    + VALS
    + [
        "=",
        ",",
        ".",
        " ",
        "A",
        "B",
        "Q",
        "read",
        "height",
        "of",
        "bar",
        "image",
        "yes",
        "no",
        "->",
        "neither",
        "both",
        "<img>",
        "<p>",
        "<t>",
        "max",
        "min",
        "diff",
        "boxed",
        "|",
        ":",
        "<pad>",
        "Response",
        "AC",
    ]
)
words += [f"A{k}" for k in KEYS] + [f"B{k}" for k in KEYS]
V = {w: i for i, w in enumerate(words)}


def claims(ks, vs, tag):
    out = []
    for k in ks:
        if a.fmt == "tagged":
            out += [tag + k, "=", " ", vs[k], ","]
        elif a.fmt == "adj":
            out += [k, vs[k], ","]
        elif a.fmt == "tagadj":
            out += [tag + k, vs[k], ","]
        elif a.fmt == "tagsep":
            out += [tag, k, vs[k], ","]
        else:
            out += [k, "=", " ", vs[k], ","]
    return out


def example(rng):
    img = {k: rng.choice(VALS) for k in KEYS}
    A = dict(img)
    B = dict(img)
    lo, hi = map(int, a.ndiff.split(","))
    for k in rng.sample(KEYS, rng.randint(lo, hi)):
        A[k] = rng.choice(VALS)
    for k in rng.sample(KEYS, rng.randint(lo, hi)):
        B[k] = rng.choice(VALS)
    prompt = ["<p>"] + ["<img>"] * 36 + ["bar", "C", "to", "L"] if False else ["<p>"] + ["<img>"] * 36
    if a.fmt == "table":
        for k in KEYS:
            prompt += [k, ":", "A", "=", " ", A[k], ",", "B", "=", " ", B[k], "."]
    else:
        prompt += ["Response", "A", ":"] + claims(KEYS, A, "A") + ["max", "=", " ", "8", "."]
        prompt += ["Response", "B", ":"] + claims(KEYS, B, "B") + ["max", "=", " ", "8", "."]
    checks = rng.sample(KEYS, len(KEYS)) if a.dense else rng.sample(KEYS, rng.randint(2, 4))
    if a.indep:
        A = {k: rng.choice(VALS) for k in KEYS}
        B = {k: rng.choice(VALS) for k in KEYS}
    for c in checks:
        prompt += ["read", "height", "of", "bar", c, "."]
    prompt += ["<t>"]
    tgt, vmask = [], []
    for c in checks:
        if a.fmt == "tagged":
            seg = ["read", "height", "of", "bar", c, ".", "A" + c, "=", " ", A[c], ",", "B" + c, "=", " ", B[c], "."]
        elif a.fmt == "adj":
            seg = ["read", "height", "of", "bar", c, ".", "A", c, A[c], ",", "B", c, B[c], "."]
        elif a.fmt == "tagadj":
            seg = ["read", "height", "of", "bar", c, ".", "A" + c, A[c], ",", "B" + c, B[c], "."]
        elif a.fmt == "tagsep":
            seg = ["read", "height", "of", "bar", c, ".", "A", c, A[c], ",", "B", c, B[c], "."]
        else:
            seg = ["read", "height", "of", "bar", c, ".", "A", c, "=", " ", A[c], ",", "B", c, "=", " ", B[c], "."]
        m = [1 if i == seg.index(A[c], 6) and False else 0 for i in range(len(seg))]
        vi = [i for i in range(6, len(seg)) if seg[i] in VALS]
        m[vi[0]] = 1
        m[vi[1]] = 2
        tgt += seg
        vmask += m
    return [V[w] for w in prompt], [V[w] for w in tgt], vmask


rng = random.Random(a.seed)
train = [example(rng) for _ in range(a.npairs)]
val = [example(random.Random(10**6 + i)) for i in range(256)]
cfg = Qwen2Config(
    vocab_size=len(words),
    hidden_size=a.hidden,
    intermediate_size=2 * a.hidden,
    num_hidden_layers=a.layers,
    num_attention_heads=a.heads,
    num_key_value_heads=a.kv,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    rope_theta=a.theta,
)
model = Qwen2ForCausalLM(cfg)


def batchify(exs):
    L = max(len(p) + len(t) for p, t, _ in exs)
    ids = torch.full((len(exs), L), V["<pad>"])
    lab = torch.full((len(exs), L), -100)
    w = torch.zeros(len(exs), L)
    att = torch.zeros(len(exs), L, dtype=torch.long)
    vpos = torch.zeros(len(exs), L, dtype=torch.long)
    for i, (p_, t, m) in enumerate(exs):
        s = p_ + t
        ids[i, : len(s)] = torch.tensor(s)
        att[i, : len(s)] = 1
        lab[i, len(p_) : len(s)] = torch.tensor(t)
        vpos[i, len(p_) : len(s)] = torch.tensor(m)
        w[i, len(p_) : len(s)] = torch.tensor([a.wval if x else 1.0 for x in m])
    return ids, att, lab, w, vpos


def evaluate():
    model.eval()
    okA = okB = n = okdiff = ndiff = 0
    with torch.no_grad():
        for i in range(0, len(val), 64):
            ids, att, lab, w, vpos = batchify(val[i : i + 64])
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
            pred = logits.argmax(-1)
            gold = ids[:, 1:]
            vp = vpos[:, 1:]
            okA += ((pred == gold) & (vp == 1)).sum().item()
            okB += ((pred == gold) & (vp == 2)).sum().item()
            n += (vp == 1).sum().item()
            # B values where B differs from A's value on that line
            for b in range(ids.shape[0]):
                for j in (vp[b] == 2).nonzero().flatten().tolist():
                    aj = (vp[b, :j] == 1).nonzero().flatten()[-1].item()
                    if gold[b, j] != gold[b, aj]:
                        ndiff += 1
                        okdiff += int(pred[b, j] == gold[b, j] and pred[b, aj] == gold[b, aj])
    model.train()
    return okA / n, okB / n, okdiff / max(ndiff, 1)


r = random.Random(a.seed)
t0 = time.time()
step = 0
if a.pre:
    pool = [V[w] for w in KEYS + VALS + ["=", ",", ".", " ", "A", "B", "read", "height", "of", "bar", "image"]]

    def rep_example(rr):
        n = rr.randint(8, 40) if a.prevar else a.prelen
        seq = [rr.choice(pool) for _ in range(n)]
        if a.prevar:  # the copy starts at a random point of the sequence: the offset varies, so only content finds it
            st = rr.randint(0, n - 8)
            return [V["<p>"]] + seq + [V["<t>"]] + seq[st : st + 2], seq[st + 2 : st + 8], [1] * 6
        return [V["<p>"]] + seq + [V["<t>"]], seq, [1] * len(seq)

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    rr = random.Random(a.seed + 99)
    for s_ in range(a.pre):
        f = min(1, (s_ + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s_ / a.pre))
        for g in opt.param_groups:
            g["lr"] = a.lr * f
        ids, att, lab, w, _ = batchify([rep_example(rr) for _ in range(a.bs)])
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), lab[:, 1:].reshape(-1), ignore_index=-100
        )
        opt.zero_grad()
        ce.backward()
        if a.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        if (s_ + 1) % 200 == 0:
            with torch.no_grad():
                ids, att, lab, w, _ = batchify([rep_example(random.Random(7 + i)) for i in range(64)])
                pred = model(input_ids=ids, attention_mask=att).logits[:, :-1].argmax(-1)
                m = lab[:, 1:] != -100
                print(
                    "pre", s_ + 1, "repeat acc %.3f" % ((pred == lab[:, 1:]) & m).sum().div(m.sum()).item(), flush=True
                )
print(vars(a), flush=True)


def report():
    print(
        step,
        "loss %.3f" % loss.item(),
        "A %.3f B %.3f Bdiff %.3f" % evaluate(),
        "%.0fs" % (time.time() - t0),
        flush=True,
    )


while step < a.steps:
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    for s in range(a.block):
        f = min(1, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / a.block))
        for g in opt.param_groups:
            g["lr"] = a.lr * f
        ids, att, lab, w, _ = batchify(r.sample(train, a.bs))
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), lab[:, 1:].reshape(-1), reduction="none", ignore_index=-100
        )
        ww = w[:, 1:].reshape(-1)
        loss = (ce * ww).sum() / (lab[:, 1:] != -100).sum()
        opt.zero_grad()
        loss.backward()
        if a.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        step += 1
        if step % 200 == 0 and a.block > 200:  # long blocks: every 200 steps
            report()
    if a.block <= 200:  # otherwise at each block's end
        report()
