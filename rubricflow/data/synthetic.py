"""Synthetic multimodal tasks with recorded ground-truth reasoning facts.

Three generators, deterministic by seed (each sample's RNG is seeded from (seed, task, split, index)):

* ``counting``  coloured shapes in the cells of a 2x2 grid; "How many red shapes are there?"
* ``barchart``  three bars A, B, C of heights 1-8; "tallest minus shortest?" or "the sum of the three bars?"
                (half each; "Which bar is the tallest?" with ``TALLEST_SHARE``). Both are multi-step deductions over
                the read heights; the sum (``s = A + B``, ``total = s + C``, written with their working as in
                ``arith``) uses every one. A policy warm-started to read the bars still has them to learn, so
                perception passes before deduction (RuCL's foundational / advanced order).
* ``geometry``  two lattice points P (red) and Q (blue) on a 5x5 grid; area of the right triangle
                P, Q, (xQ, yP): perception P, Q; intermediate dx, dy, area.
* ``arith``     text only: a multi-step arithmetic word problem (rubricflow.data.arith): given a, b, c;
                intermediate s, t; the smol profile's task for a real text policy.

Wide variants (``WIDE_GENERATORS``, ``generate_samples(..., keys=K)``): the same tasks with ``K`` perception keys, more
than a judge's 4-check budget (DeltaRubric's ``pairs.form: wide``, where a checklist must be chosen):

* ``counting``  shapes in ``K`` colours (``WIDE_COLORS``) in the cells of a 3x3 grid (1-9 shapes);
* ``barchart``  ``K`` bars labelled C, D, E, ... (``WIDE_BAR_LABELS``: not A, B, P, Q) of heights 1-8 (repeats
                allowed, tallest - shortest >= 4 so a bar can be misread strictly between the extremes); "tallest bar
                minus the shortest bar?".

Their images are seeded apart from the narrow ones (task name ``<task>-wide<K>`` in the seed); the narrow generators
and their outputs are untouched.

Images are small (56 px by default = 4 visual tokens for Qwen2.5-VL): learning is visible on CPU only at that
size. Every sample records ``facts`` (see rubricflow.data.traces) so reasoning can be checked, not just answers.

Legibility for the tiny CPU policy (0.6 M parameters), measured with SFT on 2000 training samples per task, val
accuracy against the majority answer: counting and barchart are learnt (both reach 100% after 800 cosine steps),
geometry is not: its perception (P and Q stated correctly) stayed at 0-6% after 800 geometry-only steps, both
on this 5x5 lattice and on a 4x4 lattice at patch centres, so its accuracy never left the majority baseline.
The tiny profile therefore trains on counting and barchart only (``data.tasks``); geometry stays for larger
models. Bar heights run 1-8 rather than 1-5 so that barchart is not solved in the first few hundred steps.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

from PIL import Image, ImageDraw

from rubricflow.data.arith import gen_arith
from rubricflow.data.schema import SPLITS, Sample, write_dataset
from rubricflow.data.traces import fmt

COLORS = {"red": (220, 30, 30), "green": (30, 160, 40), "blue": (30, 60, 220)}
SHAPES = ("circle", "square", "triangle")


def _rng(seed: int, task: str, split: str, index: int) -> random.Random:
    h = hashlib.sha256(f"{seed}:{task}:{split}:{index}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def _canvas(size: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    im = Image.new("RGB", (size, size), (255, 255, 255))
    return im, ImageDraw.Draw(im)


# ------------------------------------------------------------------------------------------------------------
def _draw_shape(d: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill) -> None:
    """One counting shape (``SHAPES``) of radius ``r`` centred at ``(cx, cy)``."""
    box = [cx - r, cy - r, cx + r, cy + r]
    if shape == "circle":
        d.ellipse(box, fill=fill)
    elif shape == "square":
        d.rectangle(box, fill=fill)
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)


def gen_counting(rng: random.Random, size: int) -> tuple[Image.Image, str, str, str, dict]:
    im, d = _canvas(size)
    # A 2x2 grid: each cell is one merged Qwen2.5-VL visual token at 56 px (28 px), which keeps counting
    # learnable for a tiny CPU model; colours and shapes vary per cell.
    cell = size / 2
    n = rng.randint(1, 4)
    cells = rng.sample(range(4), n)
    counts = {c: 0 for c in COLORS}
    for c in cells:
        color = rng.choice(list(COLORS))
        shape = rng.choice(SHAPES)
        counts[color] += 1
        cx, cy = (c % 2 + 0.5) * cell, (c // 2 + 0.5) * cell
        _draw_shape(d, shape, cx, cy, cell * 0.36, COLORS[color])
    target = rng.choice(list(COLORS))
    q = f"How many {target} shapes are there?"
    facts = {
        "task": "counting",
        "perception": [[c, counts[c]] for c in COLORS],
        "intermediate": [],
        "target": target,
        "question_type": "count",
    }
    return im, q, str(counts[target]), "int", facts


BAR_MAX = 8  # bar heights 1..BAR_MAX (distinct): one unit is (size - 8) / 8 = 6 px at 56 px
# Share of "which bar is the tallest?" questions; the rest split evenly between the difference and the sum. 0: every
# bar-chart question is a multi-step deduction over the read heights (the tallest question is one comparison, and
# a 1-in-3 guess), so the deduction rubrics measure deduction rather than a single max.
TALLEST_SHARE = 0.0


def gen_barchart(rng: random.Random, size: int) -> tuple[Image.Image, str, str, str, dict]:
    im, d = _canvas(size)
    values = rng.sample(range(1, BAR_MAX + 1), 3)
    labels = ["A", "B", "C"]
    base = size - 4
    unit = (size - 8) / BAR_MAX
    width = size / 5
    for i, v in enumerate(values):
        x0 = size * (0.12 + 0.3 * i)
        d.rectangle([x0, base - v * unit, x0 + width, base], fill=(40, 40, 40))
    d.line([(0, base), (size, base)], fill=(120, 120, 120))
    vals = dict(zip(labels, values))
    hi, lo = max(values), min(values)
    steps = None
    u = rng.random()
    if u < TALLEST_SHARE:
        q = "Bars A, B, C from left to right. Which bar is the tallest?"
        ans, atype, qt = labels[values.index(hi)], "choice", "tallest"
        inter = [["max", hi]]
    elif u < TALLEST_SHARE + (1 - TALLEST_SHARE) / 2:
        q = "Bars A, B, C from left to right. What is the tallest bar minus the shortest bar?"
        ans, atype, qt = str(hi - lo), "int", "diff"
        inter = [["max", hi], ["min", lo], ["diff", hi - lo]]
    else:  # two additions over every read value: the deduction a reading model has still to learn
        q = "Bars A, B, C from left to right. What is the sum of the three bars?"
        s = vals["A"] + vals["B"]
        ans, atype, qt = str(s + vals["C"]), "int", "sum"
        inter = [["s", s], ["total", s + vals["C"]]]
        steps = [["s", "+", "A", "B"], ["total", "+", "s", "C"]]
    facts = {
        "task": "barchart",
        "perception": [[k, v] for k, v in vals.items()],
        "intermediate": inter,
        "target": None,
        "question_type": qt,
    }
    if steps is not None:
        facts["steps"] = steps
    return im, q, ans, atype, facts


def gen_geometry(rng: random.Random, size: int) -> tuple[Image.Image, str, str, str, dict]:
    im, d = _canvas(size)
    margin = size * 0.1
    step = (size - 2 * margin) / 4

    def px(x: int, y: int) -> tuple[float, float]:
        return margin + x * step, size - margin - y * step

    for k in range(5):  # light lattice
        d.line([px(k, 0), px(k, 4)], fill=(225, 225, 225))
        d.line([px(0, k), px(4, k)], fill=(225, 225, 225))
    d.line([px(0, 0), px(4, 0)], fill=(90, 90, 90))
    d.line([px(0, 0), px(0, 4)], fill=(90, 90, 90))
    while True:
        p = (rng.randint(0, 4), rng.randint(0, 4))
        q = (rng.randint(0, 4), rng.randint(0, 4))
        if p[0] != q[0] and p[1] != q[1]:
            break
    r = size * 0.06
    for (x, y), color in ((p, COLORS["red"]), (q, COLORS["blue"])):
        cx, cy = px(x, y)
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color)
    dx, dy = abs(q[0] - p[0]), abs(q[1] - p[1])
    area = dx * dy / 2
    question = "Red point P and blue point Q are on the grid. What is the area of the right triangle P, Q, (xQ, yP)?"
    facts = {
        "task": "geometry",
        "perception": [["P", list(p)], ["Q", list(q)]],
        "intermediate": [["dx", dx], ["dy", dy], ["area", area]],
        "target": None,
        "question_type": "area",
    }
    return im, question, fmt(float(area)), "float" if not float(area).is_integer() else "int", facts


# ------------------------------------------------------------------------------------------------------------
# Wide variants: more perception keys than a 4-check checklist can cover

WIDE_COLORS = {
    **COLORS, "yellow": (230, 200, 20), "purple": (130, 40, 170), "orange": (240, 130, 20), "cyan": (20, 190, 200),
    "pink": (240, 120, 180), "brown": (120, 70, 30), "gray": (130, 130, 130), "black": (0, 0, 0),
    "olive": (120, 130, 20),
}
WIDE_GRID = 3  # cells per side of a wide counting scene: 1..WIDE_GRID**2 shapes
WIDE_KEYS = (5, len(WIDE_COLORS))  # the perception keys a wide scene may have (colours; bars: at most 12 too)
WIDE_SPREAD = 4  # wide bar charts: tallest - shortest at least this, so a bar can be misread between the extremes
# wide bar charts' labels: letters that are neither a response's name (A, B: a check "bar A" would name a response,
# and an evidence line "A A = 3" would read two ways) nor a fixed claim key (geometry's points P, Q)
WIDE_BAR_LABELS = "CDEFGHIJKLMN"


def _check_keys(keys: int) -> None:
    if not WIDE_KEYS[0] <= keys <= WIDE_KEYS[1]:
        raise ValueError(f"wide generators: keys must be in {WIDE_KEYS[0]}..{WIDE_KEYS[1]}, got {keys}")


def gen_counting_wide(rng: random.Random, size: int, keys: int) -> tuple[Image.Image, str, str, str, dict]:
    """Shapes in ``keys`` colours in a 3x3 grid; "How many <colour> shapes are there?"."""
    _check_keys(keys)
    im, d = _canvas(size)
    colours = list(WIDE_COLORS)[:keys]
    cell = size / WIDE_GRID
    cells = rng.sample(range(WIDE_GRID**2), rng.randint(1, WIDE_GRID**2))
    counts = {c: 0 for c in colours}
    for c in cells:
        color, shape = rng.choice(colours), rng.choice(SHAPES)
        counts[color] += 1
        cx, cy = (c % WIDE_GRID + 0.5) * cell, (c // WIDE_GRID + 0.5) * cell
        _draw_shape(d, shape, cx, cy, cell * 0.36, WIDE_COLORS[color])
    target = rng.choice(colours)
    facts = {"task": "counting", "perception": [[c, counts[c]] for c in colours], "intermediate": [],
             "target": target, "question_type": "count"}
    return im, f"How many {target} shapes are there?", str(counts[target]), "int", facts


def gen_barchart_wide(rng: random.Random, size: int, keys: int) -> tuple[Image.Image, str, str, str, dict]:
    """``keys`` bars A, B, ... of heights 1..BAR_MAX; "What is the tallest bar minus the shortest bar?"."""
    _check_keys(keys)
    im, d = _canvas(size)
    labels = list(WIDE_BAR_LABELS[:keys])
    while True:
        values = [rng.randint(1, BAR_MAX) for _ in labels]
        if max(values) - min(values) >= WIDE_SPREAD:
            break
    base, unit, slot = size - 4, (size - 8) / BAR_MAX, size / keys
    for i, v in enumerate(values):
        x0 = slot * (i + 0.2)
        d.rectangle([x0, base - v * unit, x0 + slot * 0.6, base], fill=(40, 40, 40))
    d.line([(0, base), (size, base)], fill=(120, 120, 120))
    hi, lo = max(values), min(values)
    q = f"Bars {labels[0]} to {labels[-1]} from left to right. What is the tallest bar minus the shortest bar?"
    facts = {"task": "barchart", "perception": [[k, v] for k, v in zip(labels, values)],
             "intermediate": [["max", hi], ["min", lo], ["diff", hi - lo]], "target": None, "question_type": "diff"}
    return im, q, str(hi - lo), "int", facts


WIDE_GENERATORS: dict[str, Callable[[random.Random, int, int], tuple]] = {
    "counting": gen_counting_wide,
    "barchart": gen_barchart_wide,
}


GENERATORS: dict[str, Callable[[random.Random, int], tuple]] = {
    "counting": gen_counting,
    "barchart": gen_barchart,
    "geometry": gen_geometry,
    "arith": gen_arith,  # text only (rubricflow.data.arith): the generator returns no image
}
TEXT_TASKS = frozenset({"arith"})  # tasks whose samples have no image (the validation gate expects none)


def generate_samples(
    tasks: list[str], sizes: dict[str, int], seed: int, image_size: int, out_dir: str | Path, progress=None,
    keys: int | None = None,
) -> list[Sample]:
    """Render images into ``out_dir/images`` and return the samples (not yet written as parquet). ``keys``: None =
    the tasks' own generators; a number = their wide variants with that many perception keys (``WIDE_GENERATORS``)."""
    if keys is not None and (bad := [t for t in tasks if t not in WIDE_GENERATORS]):
        raise ValueError(f"wide samples (keys={keys}): no wide variant of {bad}; expected tasks among "
                         f"{sorted(WIDE_GENERATORS)}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    for task in tasks:
        gen = GENERATORS[task] if keys is None else partial(WIDE_GENERATORS[task], keys=keys)
        seed_task = task if keys is None else f"{task}-wide{keys}"
        for split in SPLITS:
            for i in range(int(sizes.get(split, 0))):
                rng = _rng(seed, seed_task, split, i)
                im, q, ans, atype, facts = gen(rng, image_size)
                sid = f"{task}-{split}-{i:05d}"
                images = []
                if im is not None:
                    images = [f"images/{sid}.png"]
                    im.save(out / images[0], optimize=False)
                samples.append(Sample(sid, images, q, ans, atype, task, facts, split, f"synthetic/{task}"))
                if progress is not None:
                    progress()
    return samples


def build_synthetic_dataset(
    out_dir: str | Path, tasks: list[str], sizes: dict[str, int], seed: int, image_size: int, progress=None
) -> list[Sample]:
    samples = generate_samples(tasks, sizes, seed, image_size, out_dir, progress)
    write_dataset(
        out_dir,
        samples,
        manifest={"generator": "rubricflow.data.synthetic", "seed": seed, "image_size": image_size, "tasks": tasks},
    )
    return samples
