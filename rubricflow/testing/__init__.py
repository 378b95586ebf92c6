"""Test tools shared by the tests and the benches (``bench/``): servers and toy models, never used by pipeline stages
and importing no method (the method-specific drills live under ``tests/``).

- ``judge_server``: a loopback OpenAI-compatible judge server with fixed latency and fault injection.
- ``toy_task``: a toy GRPO task (prompts, reward) and tiny text / vision-language policies built offline.
- ``study_units``: a toy study unit function (no training, fixed metrics) recording where each attempt ran.
- ``vllm_rollouts``: the tiny rollout model and the vLLM generation drills run in the vLLM environment.
"""
