"""The smol judge check: the response kinds, the agreement numbers, kappa, and the compact verdict format."""

from __future__ import annotations

import json
import random

import pytest

from rubricflow.data.arith import gen_arith
from rubricflow.data.schema import Sample
from rubricflow.judge.parse import parse_judgment
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.judge.prompt import judgment_schema, user_prompt
from rubricflow.judge.protocol import JudgeRequest, Judgment, Verdict
from rubricflow.methods.rucl.rubrics.pool import load_default_pool
from rubricflow.judge.agreement import agreement, cohen_kappa, probe_requests, probe_response
from rubricflow.methods.smol.judge_check import judge_and_compare

POOL = {r.id: r for r in load_default_pool("rubricflow/methods/rucl/resources/rubric_pool_text.json").rubrics}


def sample(seed=0):
    _, q, ans, atype, facts = gen_arith(random.Random(seed))
    return Sample(f"arith-calib-{seed}", [], q, ans, atype, "arith", facts, "calib")


def test_response_kinds_carry_the_intended_flaw():
    s = sample(3)
    gold = probe_response("gold", s.facts, s.answer)
    (key, val), _ = s.facts["intermediate"]
    assert probe_response("bare", s.facts, s.answer) == f"\\boxed{{{s.answer}}}"
    assert probe_response("wrong_step", s.facts, s.answer) == gold.replace(f"{key} = {val}", f"{key} = {val + 1}")
    assert probe_response("wrong_answer", s.facts, s.answer).endswith(f"\\boxed{{{int(s.answer) + 1}}}")
    with pytest.raises(ValueError, match="unknown response kind 'nope'"):
        probe_response("nope", s.facts, s.answer)


def test_agreement_kappa_and_the_majority_line_by_hand():
    ref = [Judgment("ok", {"R": Verdict(True, x)}) for x in (True, True, True, False)]
    always_pass = [Judgment("ok", {"R": Verdict(True, True)})] * 4
    row = agreement(ref, always_pass, ["R"])["R"]
    assert row["agree"] == 0.75 and row["majority"] == 0.75 and row["kappa"] == 0.0  # a constant judge: chance
    flipped = [Judgment("ok", {"R": Verdict(True, not x)}) for x in (True, True, True, False)]
    assert agreement(ref, flipped, ["R"])["R"]["kappa"] == pytest.approx(-0.6)  # po 0, pe (3 + 3) / 16
    perfect = agreement(ref, ref, ["R"])["R"]
    assert perfect["agree"] == 1.0 and perfect["kappa"] == 1.0
    # a failed judgment and a rubric the judge left out are not compared
    mixed = [Judgment("failed", reason="x"), Judgment("ok", {}), *always_pass[:2]]
    assert agreement(ref, mixed, ["R"])["R"]["n"] == 2
    assert cohen_kappa([("pass", "pass")] * 3) is None


def test_judge_and_compare_reports_statuses_and_agreement_against_the_programmatic_judge():
    reqs = probe_requests([sample(1), sample(2)], ["gold", "bare"], [POOL["W11"], POOL["W04"]])
    ref = ProgrammaticJudge().judge(reqs)
    # the programmatic verdicts: gold passes both; bare passes W11 (boxed) and fails W04 (no intermediate value)
    assert ([(j.verdicts["W11"].satisfied, j.verdicts["W04"].satisfied) for j in ref]
            == [(True, True), (True, False)] * 2)

    class SaysPassFailsOne:
        def judge(self, requests):
            out = [Judgment("ok", {r.id: Verdict(True, True) for r in q.rubrics}) for q in requests]
            out[-1] = Judgment("failed", reason="max_tokens")
            return out

    res = judge_and_compare(SaysPassFailsOne(), ref, reqs)
    assert res["statuses"] == {"ok": 3, "repaired": 0, "failed": 1}
    assert res["agreement"]["W11"]["agree"] == 1.0 and res["agreement"]["W04"]["agree"] == pytest.approx(2 / 3)
    assert res["top_failure_reasons"] == ["1x max_tokens"] and len(res["judgments"]) == 4


def test_compact_verdicts_parse_strictly_and_the_schema_allows_only_three_values():
    ids = ["W01", "W04", "W11"]
    j = parse_judgment(json.dumps({"verdicts": {"W01": "pass", "W04": "fail", "W11": "n/a"}}), ids)
    assert j.status == "ok"
    assert j.verdicts == {"W01": Verdict(True, True), "W04": Verdict(True, False), "W11": Verdict(False, None)}
    odd = parse_judgment(json.dumps({"verdicts": {"W01": "pass", "W04": "maybe", "W11": "n/a"}}), ids)
    assert odd.status == "repaired" and "W04" not in odd.verdicts  # never guessed as unsatisfied
    schema = judgment_schema(ids, verdict_format="compact")
    assert schema["properties"]["verdicts"]["properties"]["W04"] == {"type": "string", "enum": ["pass", "fail", "n/a"]}
    prompt = user_prompt(JudgeRequest("s", "q", "r", [POOL[i] for i in ids]), verdict_format="compact")
    assert '"pass" or "fail" or "n/a"' in prompt and "rationale" not in prompt
    with pytest.raises(ValueError, match="verdict format"):
        user_prompt(JudgeRequest("s", "q", "r", [POOL["W01"]]), verdict_format="prose")


def test_smol_judge_refuses_a_judge_whose_judgments_all_failed():
    """The attack: the server SIGKILLed mid-stage (or every call rejected with 400): 64 of 64 failed and the stage
    wrote its outputs and exited 0. Now the budget check raises naming the server and the reasons."""
    from rubricflow.judge.errors import JudgeFailureBudgetExceeded
    from rubricflow.methods.smol.judge_check import require_within_budget

    reqs = probe_requests([sample(i) for i in range(2)], ["gold", "bare"], [POOL["W01"], POOL["W04"]])
    reference = ProgrammaticJudge().judge(reqs)

    class Dead:
        def judge(self, requests):
            return [Judgment("failed", reason="connection refused: nothing listens at http://127.0.0.1:9/v1")
                    for _ in requests]

    # nothing judged: refused as soon as nothing can be compared (judge-agreement's own rule)
    with pytest.raises(JudgeFailureBudgetExceeded, match=r"no verdict to compare: 4 of 4 judgments failed \(100%\); "
                       r"top reasons: 4x connection refused"):
        judge_and_compare(Dead(), reference, reqs)

    class HalfDead:
        def judge(self, requests):
            good = ProgrammaticJudge().judge(requests)
            return [j if i % 2 else Judgment("failed", reason="connection refused: nothing listens at "
                                                             "http://127.0.0.1:9/v1") for i, j in enumerate(good)]

    # some judged, too many failed: the budget check raises naming the server and the reasons
    result = judge_and_compare(HalfDead(), reference, reqs)
    with pytest.raises(JudgeFailureBudgetExceeded, match=r"smol-judge at X: 2 of 4 judgments failed \(50%\), above "
                       r"judge.max_failed_frac=0.2; top reasons: 2x connection refused.*; no outputs written"):
        require_within_budget(result, 0.2, "smol-judge at X")
    require_within_budget(judge_and_compare(ProgrammaticJudge(), reference, reqs), 0.2, "ok")  # a fine judge passes


def test_smol_judge_refuses_a_judge_that_leaves_out_the_rubrics():
    """The attack (issue 37, item 3): a judge answering one rubric "n/a" and leaving out the rest was accepted by
    the smol-judge check (no judgment 'failed'). A left-out rubric is missing and counts against the budget."""
    from rubricflow.judge.errors import JudgeFailureBudgetExceeded
    from rubricflow.methods.smol.judge_check import require_within_budget

    ids = ["W01", "W04", "W11"]
    reqs = [JudgeRequest(f"s{i}", "q", "r", [POOL[r] for r in ids]) for i in range(4)]
    ref = [Judgment("ok", {r: Verdict(True, True) for r in ids}) for _ in reqs]

    class LeavesOut:
        def judge(self, requests):
            return [parse_judgment('{"verdicts": {"W01": "n/a"}}', [r.id for r in q.rubrics]) for q in requests]

    res = judge_and_compare(LeavesOut(), ref, reqs)
    with pytest.raises(JudgeFailureBudgetExceeded, match="left out a requested rubric"):
        require_within_budget(res, 0.25, "smol-judge")
