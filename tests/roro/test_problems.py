"""The GSM8K-style reader: real problems whose outcome is checkable and whose steps are not."""

import json

import pytest

from rubricflow.methods.roro.env.problems import DataFormatError, read_gsm8k
from rubricflow.methods.roro.env.task import answer_correct, check_step


def test_gsm8k_adapter(tmp_path):
    f = tmp_path / "gsm.jsonl"
    f.write_text(json.dumps({"question": "Tom has 3 apples and buys 4. How many?",
                             "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"}) + "\n")
    (p,) = read_gsm8k(f)
    assert p.answer == "7" and p.reference_steps == ["He has 3 + 4 = 7 apples.", "#### 7"]
    assert not p.checkable and check_step(p, 0, "#### 7", None).checkable is False
    assert answer_correct(p, "#### 7.0")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "7"}) + "\n" + json.dumps({"question": "q", "answer": "x"}))
    with pytest.raises(DataFormatError, match=r"bad.jsonl:1: field `answer` does not end with '#### N'"):
        read_gsm8k(bad)
