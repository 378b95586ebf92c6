"""Outcome correctness with math-verify and the exact-match fallback."""

import threading

import pytest

from rubricflow.evaluation.answers import answers_match, normalize_choice, outcome_score


@pytest.mark.parametrize(
    "pred,gold,atype,ok",
    [
        ("4", "4", "int", True),
        ("4.0", "4", "int", True),
        ("8/2", "4", "int", True),
        ("5", "4", "int", False),
        ("1/2", "0.5", "float", True),
        ("0.50", "0.5", "float", True),
        ("0.6", "0.5", "float", False),
        ("four", "4", "int", False),
        ("B", "B", "choice", True),
        ("(b)", "B", "choice", True),
        ("Option B.", "B", "choice", True),
        ("C", "B", "choice", False),
        ("BC", "B", "choice", False),
        ("Red ", "red", "text", True),
        ("blue", "red", "text", False),
        ("", "4", "int", False),
        (None, "4", "int", False),
    ],
)
def test_answers_match(pred, gold, atype, ok):
    assert answers_match(pred, gold, atype) is ok


def test_outcome_score_uses_the_last_box_and_needs_one():
    assert outcome_score("red = 2, green = 1. so red = 2. \\boxed{2}", "2", "int") == 1.0
    assert outcome_score("\\boxed{3} wait, \\boxed{2}", "2", "int") == 1.0
    assert outcome_score("\\boxed{2} no: \\boxed{3}", "2", "int") == 0.0
    assert outcome_score("the answer is 2", "2", "int") == 0.0  # no box: wrong format
    assert outcome_score("max = 5. \\boxed{B}", "B", "choice") == 1.0


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="answer_type"):
        answers_match("1", "1", "number")
    with pytest.raises(ValueError, match="not an option letter"):
        answers_match("A", "12", "choice")
    assert normalize_choice("[d]") == "D" and normalize_choice("12") is None


def test_works_outside_the_main_thread():
    """math-verify's signal-based timeouts only work in the main thread; Prefect runs tasks in threads."""
    out = {}

    def work():
        try:
            out["v"] = (outcome_score("\\boxed{8/2}", "4", "int"), outcome_score("\\boxed{1/3}", "0.5", "float"))
        except Exception as e:  # pragma: no cover - the assertion below reports it
            out["err"] = repr(e)

    th = threading.Thread(target=work)
    th.start()
    th.join()
    assert out == {"v": (1.0, 0.0)}
