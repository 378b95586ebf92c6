"""The ``local`` judge backend: an in-process transformers model with the same prompt and parser.

The model is loaded with ``models.loader.load_policy`` (a tiny offline model on CPU, or a real checkpoint on a
GPU) on first use. Vision-language judges get the images through their processor; text-only judges are told
that the images are not shown. Decoding is greedy. Output is parsed with ``parse_judgment``: a weak model's
garbage becomes ``failed`` with a reason (never a score), and so does a request whose image cannot be read. Any
other error (a failed model load, out of memory, a bug) raises: it is not a property of one sample, and turning
it into failed judgments would hide it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rubricflow.judge.config import LocalJudgeConfig
from rubricflow.judge.parse import parse_judgment
from rubricflow.judge.prompt import PROMPT_VERSION, SYSTEM_PROMPT, new_boundary, quoted_forms, user_prompt
from rubricflow.judge.protocol import JudgeRequest, Judgment

log = logging.getLogger("rubricflow.judge.local")


class LocalJudge:
    name = "local"

    def __init__(
        self,
        cfg: LocalJudgeConfig,
        *,
        image_root: str | Path | None = None,
        prompt_version: str = PROMPT_VERSION,
        model=None,
        processor=None,
    ):
        """``cfg``: the ``judge.local`` section (its settings and defaults live there). ``model``/``processor``: an
        already loaded model (tests), else ``cfg.model_path`` is loaded at the first call."""
        if prompt_version != PROMPT_VERSION:
            raise ValueError(f"judge.prompt_version: unknown template {prompt_version!r}; expected {PROMPT_VERSION!r}")
        self.cfg = cfg.model_copy(deep=True)
        self.model_path = str(cfg.model_path)
        self.model_id = Path(self.model_path).name if Path(self.model_path).exists() else self.model_path
        self.prompt_version = prompt_version
        self.image_root = Path(image_root) if image_root else None
        self._model, self._processor = model, processor
        self._generator = None

    def _gen(self):
        if self._generator is None:
            from models.generation import TransformersGenerator

            if self._model is None:
                from models.loader import load_policy

                self._model, self._processor = load_policy(
                    self.model_path, dtype=self.cfg.dtype, device=self.cfg.device
                )
            self._generator = TransformersGenerator(self._model, self._processor, batch_size=self.cfg.batch_size)
        return self._generator

    @property
    def is_vision_language(self) -> bool:
        return hasattr(self._gen().processor, "image_processor")

    def _chat(self, system: str, user: str, n_images: int) -> str:
        proc = self._gen().processor
        if hasattr(proc, "chat_prompt"):
            return proc.chat_prompt(user, n_images, system=system)
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def gen_request(self, request: JudgeRequest, boundary: str | None = None):
        from models.generation import GenRequest

        images = []
        if self.is_vision_language and request.images:
            from PIL import Image

            for p in request.images:
                path = Path(p) if Path(p).is_absolute() or self.image_root is None else self.image_root / p
                with Image.open(path) as im:
                    images.append(im.convert("RGB"))
        prompt = self._chat(SYSTEM_PROMPT, user_prompt(request, n_images_shown=len(images), boundary=boundary),
                            len(images))
        return GenRequest(prompt, images)

    def preflight(self) -> None:
        """Nothing to call: the model is loaded at the first judgment, and a load error raises there."""

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        out: list[Judgment] = []
        for i in range(0, len(requests), self.cfg.batch_size):
            chunk = requests[i : i + self.cfg.batch_size]
            gen = self._gen()
            results: list[Judgment | None] = [None] * len(chunk)
            todo = []
            boundaries = [new_boundary() for _ in chunk]  # per call, unpredictable to the judged policy
            for k, r in enumerate(chunk):
                try:
                    todo.append((k, self.gen_request(r, boundaries[k])))
                except OSError as e:  # an unreadable image: that judgment is missing, not scored
                    results[k] = Judgment("failed", reason=f"could not read image: {e}"[:300])
                    log.warning("local judge %s: %s", r.sample_id, results[k].reason)
            comps = (
                gen.generate([g for _, g in todo], n=1, max_new_tokens=self.cfg.max_new_tokens, temperature=0.0)
                if todo
                else []
            )
            for (k, _), c in zip(todo, comps):
                j = parse_judgment(c[0].text, [rb.id for rb in chunk[k].rubrics], boundary=boundaries[k],
                                   quoted=quoted_forms(chunk[k].response))
                if j.status != "ok" and not c[0].finished:
                    j.reason = f"{j.reason}; output hit max_new_tokens"
                results[k] = j
            out.extend(j for j in results if j is not None)
        return out

    async def ajudge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        return self.judge(requests)

    def generate(self, system: str, user: str, schema: dict | None = None, max_tokens: int | None = None) -> str:
        """One greedy completion (teacher capability; ``schema`` is not enforced locally, parsing is tolerant)."""
        c = self._gen().generate(
            [self.gen_request_text(system, user)],
            n=1,
            max_new_tokens=max_tokens or self.cfg.max_new_tokens,
            temperature=0.0,
        )
        return c[0][0].text

    def gen_request_text(self, system: str, user: str):
        from models.generation import GenRequest

        return GenRequest(self._chat(system, user, 0), [])
