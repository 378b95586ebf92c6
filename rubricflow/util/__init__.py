"""Utilities with no knowledge of stages, methods or models.

* ``io``: atomic file writes and the one JSONL reader;
* ``hashing``: content hashes (files, code, resume keys);
* ``env``: the process environment of every entry point (project-local caches, telemetry off, torch threads);
* ``yamlload``: strict YAML loading (a key given twice is an error).
"""
