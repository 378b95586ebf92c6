"""A vLLM worker extension (``worker_extension_cls="models.generation.vllm_worker.WeightSyncExtension"``) for weight
updates.

vLLM mixes this class into its worker, so its methods run inside the worker and are called by name through
``LLM.collective_rpc`` (every worker of the engine runs them). It adds one method, ``load_policy_weights``, on
top of vLLM's own in-place reload (``Worker.reload_weights``: the checkpoint-format weights go through the model's
``load_weights`` with layer-wise post-processing), plus one repair for vLLM's CPU backend:

* on CPU, a linear layer keeps a *packed copy* of its weight for its GEMM kernel, made when the layer is
  processed. With tied embeddings the language-model head shares the embedding's weight, but the checkpoint names
  only the embedding, so a reload updates the shared weight and never re-packs the head: generation then uses the
  old head. ``load_policy_weights`` re-runs the head's post-processing after a reload in that case (found by
  comparing vLLM's log-probs with transformers' after a sync; ``tests/models/generation/test_vllm_colocated.py``).

Only the engine process imports this module (it needs vLLM); it is importable anywhere.
"""

from __future__ import annotations


class WeightSyncExtension:
    def load_policy_weights(self, weights=None, path: str | None = None) -> int:
        """Load new weights in place: ``weights`` is an iterable of ``(hf_name, tensor)`` (same process only), or
        ``path`` a folder of ``*.safetensors`` in Hugging Face names. Returns the number of repacked heads."""
        if (weights is None) == (path is None):
            raise ValueError("load_policy_weights: pass exactly one of weights= or path=")
        self.reload_weights(weights_iterator=weights, weights_path=path, is_checkpoint_format=True)
        return self._repack_tied_head()

    def _repack_tied_head(self) -> int:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return 0
        text_cfg = self.model_config.hf_text_config
        if not getattr(text_cfg, "tie_word_embeddings", False):
            return 0
        n = 0
        for name, module in self.model_runner.get_model().named_modules():
            method = getattr(module, "quant_method", None)
            if name.rsplit(".", 1)[-1] == "lm_head" and method is not None:
                method.process_weights_after_loading(module)
                n += 1
        return n
