"""Test tools: servers and toy models used by the tests, the benches (``bench/``) and the fault and resume drills,
never by pipeline stages.

- ``judge_server``: a loopback OpenAI-compatible judge server with fixed latency and fault injection.
- ``toy_task``: a toy GRPO task (prompts, reward) and tiny text / vision-language policies built offline.
- ``toy_train``: a runnable GRPO training on the toy task (multi-process and resume checks).
"""
