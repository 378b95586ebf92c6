"""A rubric LM: the tiny causal LM that acts as the Rubricor (writes a rubric per problem) or as the Judge (writes a
judgment of a trajectory under a rubric). Sampling with memoised greedy outputs, SFT on (message, target) pairs,
and how both are built (``build_rubric_lms``)."""

from __future__ import annotations

from pathlib import Path

from models.generation import GenRequest, TransformersGenerator
from models.loader import load_policy
from models.tiny import TinyDims, build_tiny_text, save
from rubricflow.methods.roro.config import RubricLMConfig
from rubricflow.methods.roro.judge.prompts import CHECK_MARKS, FAMILIES, added_tokens, chat, reads_the_problem
from rubricflow.sections import SFTSchedule
from rubricflow.training.sft import SFTExample, train_sft


class RubricLM:
    """A tiny causal LM acting as the Rubricor or the Judge; greedy outputs are memoised until the next SFT."""

    def __init__(self, model, tokenizer, name: str, batch_size: int = 64, max_new_tokens: int = 96,
                 reads: str = "steps"):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.reads = reads  # what a Judge's input carries besides the rubric (rubricor_judge.judge_reads)
        self.gen = TransformersGenerator(model, tokenizer, batch_size=batch_size)
        self.max_new_tokens = max_new_tokens
        self._greedy: dict[str, str] = {}
        self.n_generated = 0

    @property
    def reads_problem(self) -> bool:
        """The Judge reads the problem, so its literal readings check the steps against it."""
        return reads_the_problem(self.reads)

    def generate(
        self, contents: list[str], n: int = 1, temperature: float = 0.0, seed: int | None = None
    ) -> list[list[str]]:
        """``n`` completions per user message (greedy when temperature is 0)."""
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
        self._greedy.clear()
        if not examples or steps <= 0:
            return []
        ex = [SFTExample(chat(self.tokenizer, c), t) for c, t in examples]
        settings = SFTSchedule(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=min(10, steps),
                               schedule="constant")
        return train_sft(self.model, self.tokenizer, ex, settings, seed=seed)

    def save(self, path: str | Path) -> Path:
        return save(self.model, self.tokenizer, path)


def build_rubric_lms(
    corpus: list[str], judge_cfg: RubricLMConfig, rubricor_cfg: RubricLMConfig, batch_size: int, seed: int,
    families=FAMILIES, judge_reads: str = "steps", marks: bool | None = None,
) -> tuple[RubricLM, RubricLM]:
    """The Judge and the Rubricor: fresh tiny Qwen2s with an offline tokenizer trained on ``corpus`` (plus
    ``prompts.added_tokens(families)``, and the check marks when ``marks`` says so: by default when the Judge reads
    them), or pretrained models loaded from ``init``; the Judge's input is as ``judge_reads`` says."""
    marks = judge_reads == "checked" if marks is None else marks
    out = []
    for i, (name, rc) in enumerate((("judge", judge_cfg), ("rubricor", rubricor_cfg))):
        if rc.source == "pretrained":
            if not rc.init:
                raise ValueError(f"roro.rubricor_judge.{name}.init: a pretrained {name} needs a model id or directory")
            model, tok = load_policy(rc.init)
            out.append(RubricLM(model, tok, name, batch_size, rc.max_new_tokens,
                                judge_reads if name == "judge" else "steps"))
            continue
        dims = TinyDims(hidden_size=rc.hidden_size, num_layers=rc.num_layers, num_heads=4, num_kv_heads=2,
                        vocab_size=rc.vocab_size, max_positions=1024)
        model, tok = build_tiny_text(corpus, dims, seed=seed + i)
        tok.add_tokens(added_tokens(families, marks))
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        out.append(RubricLM(model, tok, name, batch_size, rc.max_new_tokens,
                            judge_reads if name == "judge" else "steps"))
    return out[0], out[1]


def load_rubric_lm(spec: RubricLMConfig, name: str, batch_size: int, reads: str = "steps") -> RubricLM:
    """The trained ``name`` (``judge`` or ``rubricor``) saved at ``spec.path`` by ``roro_rubricor_judge`` (a Judge is
    loaded with the ``judge_reads`` it was trained with)."""
    if not (Path(spec.path) / "config.json").exists():
        raise FileNotFoundError(f"roro.rubricor_judge.{name}.path={spec.path}: no {name.capitalize()}; run "
                                "`rubricflow roro-rubricor-judge`")
    model, tok = load_policy(spec.path)
    if name == "judge" and reads == "checked":
        vocab = tok.get_vocab()
        if not all(m in vocab for m in CHECK_MARKS):
            raise ValueError(f"roro.rubricor_judge.judge.path={spec.path}: this Judge was not trained to read check "
                             f"marks ({', '.join(CHECK_MARKS)} are not in its tokenizer) but judge_reads is 'checked'; "
                             "retrain it (`rubricflow roro-rubricor-judge`) or set the reading it was trained with")
    return RubricLM(model, tok, name, batch_size, spec.max_new_tokens, reads if name == "judge" else "steps")
