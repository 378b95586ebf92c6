"""Can the tiny policy copy a response's value for a checked key? A capability probe, not a speed benchmark.

The wide DeltaRubric verifier executes a check by writing each response's claim for the checked key (``A D = 7,
B D = 3``). Warm-started on the wide pairs it wrote one repeated value instead (docs/deltarubric_planning.md, "A warm
start on the wide pairs: what stops it"). This probe isolates that one skill from the image and the rest of the task:
text-only prompts with two responses that state values 1-8 for keys C..L (each response off the common values on 1-4
keys), 2-4 checks, and a target that copies both responses' values for each checked key. It trains the same tiny
architecture (``models.tiny.build_tiny_text``: the DeltaRubric warm start's 2-layer, 64-wide Qwen2 text stack and a
BPE tokenizer trained on the probe's texts) with the warm start's SFT loop (``rubricflow.training.sft.train_sft`` in
blocks: cosine per block, fresh AdamW moments), and measures on held-out prompts, teacher-forced, the share of
value tokens predicted right for A and for B, and the share of checks whose two values differ with both right (what
a verifier needs to decide: repeating A's value for B scores on the rest).

Formats (the claim as the responses state it / as the check line copies it):

* ``production``: ``C = 6`` / ``A D = 7, B D = 3`` (the wide pairs' text; the value three tokens after its key, and
  the same key in both responses);
* ``tagged``: ``AC = 6`` / ``AD = 7, BD = 3`` (the response's letter fused into the key: one token names both);
* ``adjacent``: ``C6`` / ``A D7, B D3`` (the value right after its key);
* ``fused``: ``AC6`` / ``AD7, BD3`` (both: the token before the value names the response and the key, so the copy is
  the one-token look-up of an induction head).

``--induction-steps N`` first pretrains each fresh model on the induction task (``rubricflow.training.induction``:
copy what follows a random sequence's span found by its content), as ``deltarubric.sft.induction_steps`` does for the
warm start's base. The baseline is ``production``, trained in the same run. Prints one line per (format, seed, block)
and a final table of the last block's values, each format against the baseline.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/copy_probe.py [--formats production,fused] [--seeds 0,1] \\
        [--steps 3000] [--block 200] [--induction-steps 3000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LABELS = "CDEFGHIJKL"  # the wide bar charts' labels (A and B name the responses)
FORMATS = ("production", "tagged", "adjacent", "fused")


def claim(fmt: str, who: str, key: str, value: int) -> str:
    """One claim as response ``who`` states it in the prompt."""
    return {"production": f"{key} = {value}", "tagged": f"{who}{key} = {value}", "adjacent": f"{key}{value}",
            "fused": f"{who}{key}{value}"}[fmt]


def copy_line(fmt: str, key: str, a: int, b: int) -> str:
    """A check's evidence: both responses' values for ``key`` (every digit of the line is a value: A's, then B's)."""
    if fmt in ("tagged", "fused"):
        return f"read the height of bar {key}. {claim(fmt, 'A', key, a)}, {claim(fmt, 'B', key, b)}"
    return f"read the height of bar {key}. A {claim(fmt, 'A', key, a)}, B {claim(fmt, 'B', key, b)}"


def example(fmt: str, rng: random.Random, n_keys: int = 10) -> tuple[str, str, list[tuple[int, int]]]:
    keys = list(LABELS[:n_keys])
    common = {k: rng.randint(1, 8) for k in keys}
    a, b = dict(common), dict(common)
    for side in (a, b):
        for k in rng.sample(keys, rng.randint(1, min(4, n_keys))):
            side[k] = rng.randint(1, 8)
    checks = rng.sample(keys, rng.randint(2, min(4, n_keys)))
    text = {w: ", ".join(claim(fmt, w, k, s[k]) for k in keys) + "." for w, s in (("A", a), ("B", b))}
    prompt = ("Run each check: give each response's claim.\n"
              f"Response A: {text['A']}\nResponse B: {text['B']}\nChecks:\n"
              + "\n".join(f"read the height of bar {k}." for k in checks) + "\n")
    target = "\n".join(copy_line(fmt, k, a[k], b[k]) for k in checks)
    return prompt, target, [(a[k], b[k]) for k in checks]


def value_accuracy(model, tok, items) -> dict[str, float]:
    """Teacher-forced argmax at every value token of the targets: A right, B right, both right where A != B."""
    import torch

    from rubricflow.training.sft import encode_pairs, target_ids

    digits = {tok.convert_tokens_to_ids(str(d)) for d in range(1, 9)}
    right_a = right_b = n = both = differ = 0
    with torch.no_grad():
        for i in range(0, len(items), 64):
            chunk = items[i:i + 64]
            batch = encode_pairs(tok, [p for p, _, _ in chunk], None, [target_ids(tok, t) for _, t, _ in chunk])
            mask = batch.pop("completion_mask")
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            pred = logits[:, :-1].argmax(-1)
            gold = batch["input_ids"][:, 1:]
            for r, (_, _, values) in enumerate(chunk):
                pos = [j for j in range(gold.shape[1]) if mask[r, j + 1] and int(gold[r, j]) in digits]
                if len(pos) != 2 * len(values):
                    raise RuntimeError(f"copy_probe: expected {2 * len(values)} value tokens, found {len(pos)} "
                                       "(a value was merged with another token)")
                for c, (va, vb) in enumerate(values):
                    ok_a = bool(pred[r, pos[2 * c]] == gold[r, pos[2 * c]])
                    ok_b = bool(pred[r, pos[2 * c + 1]] == gold[r, pos[2 * c + 1]])
                    right_a += ok_a
                    right_b += ok_b
                    n += 1
                    if va != vb:
                        differ += 1
                        both += ok_a and ok_b
    return {"A": right_a / n, "B": right_b / n, "differ_both": both / max(differ, 1)}


def run(fmt: str, seed: int, args) -> list[dict]:
    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.sections import SFTSchedule
    from rubricflow.training.sft import SFTExample, train_sft

    rng = random.Random(seed)
    train = [example(fmt, rng, args.keys) for _ in range(args.pairs)]
    val = [example(fmt, random.Random(10**6 + i), args.keys) for i in range(args.val)]
    dims = TinyDims(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                    num_kv_heads=max(1, args.heads // 2))
    model, tok = build_tiny_text([p + t for p, t, _ in train], dims, seed=seed)
    if args.induction_steps:
        from rubricflow.training.induction import pretrain_induction, text_pool

        pool = text_pool(tok, [p + t for p, t, _ in train[:200]], seed) if args.induction_pool == "task" else None
        pre = pretrain_induction(model, tok, args.induction_steps, args.batch_size, args.lr, seed=seed, pool=pool,
                                 clip=args.grad_clip or None)
        print(f"copy_probe format={fmt} seed={seed} induction pretraining {pre['steps']} steps: copy accuracy "
              f"{pre['copy_acc_before']:.3f} -> {pre['copy_acc_after']:.3f} (chance {pre['chance']:.3f})", flush=True)
    examples = [SFTExample(prompt=p, target=t) for p, t, _ in train]
    rows = []
    t0 = time.perf_counter()
    block = SFTSchedule(steps=args.block, batch_size=args.batch_size, lr=args.lr, warmup_steps=20, schedule="cosine",
                        grad_clip=args.grad_clip or None)
    for k in range(args.steps // args.block):
        train_sft(model, tok, examples, block, seed=seed + k)
        model.eval()
        row = {"format": fmt, "keys": args.keys, "seed": seed, "steps": (k + 1) * args.block,
               **value_accuracy(model, tok, val)}
        rows.append(row)
        print(f"copy_probe format={fmt} keys={args.keys} seed={seed} steps={row['steps']} value_A={row['A']:.3f} "
              f"value_B={row['B']:.3f} differ_both={row['differ_both']:.3f} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--formats", default="production,fused")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--keys", type=int, default=10, help="claim keys per response (2-10; the wide pairs: 10)")
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--val", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--induction-steps", type=int, default=0,
                    help="pretrain each fresh model on the induction task first (rubricflow.training.induction)")
    ap.add_argument("--grad-clip", type=float, default=1.0,
                    help="gradient norm clip of every update, as sft.grad_clip (0: not clipped)")
    ap.add_argument("--induction-pool", choices=("random", "task"), default="random",
                    help="the induction sequences' tokens: a seeded sample of 32 of the vocabulary, or every "
                    "distinct token of the probe's texts (about 40; the warm start's 'task' pool takes the 32 most "
                    "frequent of its own)")
    args = ap.parse_args()
    if not 2 <= args.keys <= len(LABELS):
        ap.error(f"--keys: expected 2-{len(LABELS)}, got {args.keys}")
    import rubricflow.util.env  # noqa: F401  (threads)

    formats = args.formats.split(",")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        ap.error(f"--formats: unknown {bad}; expected some of {FORMATS}")
    if "production" not in formats:
        formats.insert(0, "production")
    seeds = [int(s) for s in args.seeds.split(",")]
    last = {}
    for fmt in formats:
        for seed in seeds:
            last[fmt, seed] = run(fmt, seed, args)[-1]
    print(f"\ncopy_probe: {args.keys} keys per response, induction pretraining {args.induction_steps} steps, after "
          f"{args.steps} steps (blocks of {args.block}), held-out, teacher-forced")
    print("| format | seed | value A | value B | both right where A != B | vs production |")
    print("|---|---|---|---|---|---|")
    for (fmt, seed), r in last.items():
        base = last["production", seed]["differ_both"]
        ratio = f"{r['differ_both'] / base:.2f}x" if base else "n/a (production 0)"
        print(f"| {fmt} | {seed} | {r['A']:.3f} | {r['B']:.3f} | {r['differ_both']:.3f} | {ratio} |")


if __name__ == "__main__":
    main()
