"""The verifier's lookup tool (`deltarubric.sft.evidence_form: quoted`): what it quotes, the targets it teaches, and
that training and evaluation quote the policy's own reading of the image, read once, never the pair's facts."""

import random
import re

import pytest

import rubricflow.config  # noqa: F401
from models.generation import Completion
from rubricflow.methods.deltarubric.config import DeltaRubricConfig, DRSFTConfig, DRTrainConfig
from rubricflow.methods.deltarubric.evaluate import Item, evaluate_judge
from rubricflow.methods.deltarubric.examples import pair_examples, pair_tokenizer_corpus
from rubricflow.methods.deltarubric.lookup import key_of, lookup_quotes
from rubricflow.methods.deltarubric.prompts import verifier_prompt
from rubricflow.methods.deltarubric.roles import VERIFIER
from rubricflow.methods.deltarubric.rollout import collect
from rubricflow.methods.deltarubric.synthetic import build_pairs
from rubricflow.methods.deltarubric.targets import reference_checks, verifier_target, worked_reading
from tests.deltarubric.scripted import mark_quotes


def test_the_tool_quotes_the_checked_keys_value_in_the_reading_and_in_each_response():
    reading = "C = 3, K = 6. tallest max = 8. \\boxed{5}"
    a, b = "C = 3, K = 5. \\boxed{5}", "K = 6, C = 2. \\boxed{4}"
    checks = ["read the height of bar K.", "check the final answer.", "find the height of the tallest bar.",
              "count the bars."]
    assert lookup_quotes(checks, reading, a, b) == [
        "image K = 6, A K = 5, B K = 6", "image answer = 5, A answer = 5, B answer = 4",
        "image max = 8, A max = ?, B max = ?", "image ? = ?, A ? = ?, B ? = ?"]  # other words: nothing found
    assert key_of("Count the purple shapes", ["red", "purple"]) == "purple"  # any task's template, case and stop
    assert key_of("read the height of bar K.", ["C"]) is None  # a key no text states is not looked up
    with pytest.raises(ValueError, match="2 quote"):
        verifier_prompt("q", "a", "b", ["x.", "y.", "z."], ["q1", "q2"])


def test_quoted_targets_restate_each_quote_with_marks_and_carry_no_reading(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"train": 16}, seed=3, partial_frac=0.5, form="wide")
    for p in pairs:
        checks = reference_checks(p)
        quoted, restated = verifier_target(p, checks, form="quoted"), verifier_target(p, checks, form="restated")
        # with the right reading quoted the lines are the restated ones, without the worked reading before them
        assert quoted.splitlines() == restated.splitlines()[1:]
        assert worked_reading(p.facts) not in quoted
        prompt = VERIFIER.prompt(p, [c.text for c in checks], worked_reading(p.facts))
        for line, q in zip(quoted.splitlines(), lookup_quotes([c.text for c in checks], worked_reading(p.facts),
                                                              p.response_a, p.response_b)):
            head = line.split(" -> ")[0].replace(" yes", "").replace(" no", "")
            assert head.endswith(q) and f"{head.split('. ', 1)[0]}. " in prompt  # the quote, copied, then marked
        assert VERIFIER.parse(quoted, [c.text for c in checks]).value == p.preferred
    # the marks follow the quoted reading, not the facts: a reading that misreads the checked bar flips them
    p = pairs[0]
    c = reference_checks(p)[0]
    truth = dict((k, v) for k, v in p.facts["perception"])[c.id]
    wrong = worked_reading(p.facts).replace(f"{c.id} = {truth},", f"{c.id} = {truth % 8 + 1},", 1)
    assert wrong != worked_reading(p.facts)
    line = verifier_target(p, [c], form="quoted").splitlines()[0]
    from rubricflow.methods.deltarubric.targets import evidence_lines
    misread = evidence_lines(p, [c], "quoted", reading=wrong)[0]
    assert f"image {c.id} = {truth % 8 + 1}," in misread and misread != line


def test_quoted_warm_start_examples_quote_the_worked_reading_in_the_verifier_prompt(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"train": 4}, seed=3, partial_frac=0.5, form="wide")
    cfg = DRSFTConfig(evidence_form="quoted", perception_images=8, equal_mode_examples=True, generative=True)
    for e in pair_examples(pairs[0], cfg, random.Random(0)):
        if e.role in ("verifier", "generative_tool"):  # verifier, noise, exhaustive modes; the generative judge
            assert e.reading == worked_reading(e.pair.facts) and e.reading not in e.target
        else:
            assert e.reading is None
    corpus = pair_tokenizer_corpus(pairs, cfg)
    assert any("Run each check on its quoted values" in t and "image " in t.split("Checks:")[-1] for t in corpus)
    keyed = pair_examples(pairs[0], DRSFTConfig(), random.Random(0))
    assert all(e.reading is None for e in keyed)  # the default: no tool
    assert DeltaRubricConfig(sft=cfg).verifier_quotes and not DeltaRubricConfig().verifier_quotes


class _Policy:
    """Scripted policy: READ prompts get ``readings[pair id]`` (an item's stand-in image is its pair id); a
    verifier prompt with quotes gets each check's line marked against its quoted image value, then the tally's
    verdict (A on a tie); a planner gets the reference checklist. Counts the READ calls."""

    def __init__(self, pairs, readings):
        self.pairs, self.readings, self.reads = pairs, readings, 0

    def _pair(self, prompt):
        return next(p for p in self.pairs if p.question in prompt and (
            "Response A" not in prompt or f"Response A: {p.response_a}\n" in prompt))

    def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, seed=None, top_p=1.0):
        out = []
        for r in requests:
            if r.prompt.startswith("Read the image.\n"):
                self.reads += 1
                out.append([Completion([], self.readings[r.images[0]], True)] * n)  # the image names its pair
                continue
            if r.prompt.startswith("List 2-4"):
                p = self._pair(r.prompt)
                text = "\n".join(f"{i}. {c.text}" for i, c in enumerate(reference_checks(p), 1))
                out.append([Completion([], text, True)] * n)
                continue
            assert "Run each check on its quoted values" in r.prompt, r.prompt[:60]
            out.append([Completion([], mark_quotes(r.prompt), True)] * n)
        return out


class _Proc:
    def chat_prompt(self, text, n_images=1, images_last=False):
        return text


def test_evaluation_reads_each_image_once_and_the_verifier_sees_the_policys_own_reading(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"test": 24}, seed=4, partial_frac=0.5, form="wide")
    items = [Item(p, [p.id]) for p in pairs]
    tokens = {"planner": 40, "verifier": 160}
    right = _Policy(pairs, {p.id: worked_reading(p.facts) for p in pairs})
    table = evaluate_judge(right, _Proc(), items, ("oracle", "exhaustive", "deltarubric"), tokens, quoted=True)
    assert right.reads == len(pairs)  # one reading per image, shared by the three verifier modes
    assert table["modes"]["oracle"]["accuracy"] == 1.0 and table["modes"]["deltarubric"]["accuracy"] == 1.0
    # a policy that reads every bar as 1 quotes its own (wrong) values: the oracle checklist no longer decides
    blind = _Policy(pairs, {p.id: re.sub(r"= \d", "= 1", worked_reading(p.facts)) for p in pairs})
    low = evaluate_judge(blind, _Proc(), items, ("oracle",), tokens, quoted=True)
    assert low["modes"]["oracle"]["accuracy"] < 0.8
    with pytest.raises(AssertionError, match="Read the image, then run each check"):  # no tool: no quotes
        evaluate_judge(right, _Proc(), items, ("oracle",), tokens)


def test_a_training_rollout_reads_before_the_verifier_and_quotes_that_reading(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"train": 3}, seed=4, partial_frac=0.5, form="wide")
    policy = _Policy(pairs, {p.id: worked_reading(p.facts) for p in pairs})
    cfg = DRTrainConfig(n_checklists=2, m_verdicts=2, k_no_rubric=1)
    policy_nr = policy.generate

    def generate(requests, **kw):  # no-rubric prompts get a bare verdict
        if requests and requests[0].prompt.startswith("Judge the two"):
            return [[Completion([], "verdict: A", True)] * kw.get("n", 1) for _ in requests]
        return policy_nr(requests, **kw)

    policy.generate = generate
    ro = collect(policy, _Proc(), [Item(p, [p.id]) for p in pairs], cfg, quoted=True)
    assert policy.reads == len(pairs) and all(it.reading == worked_reading(it.pair.facts) for it in ro.items)
    assert all("Run each check on its quoted values" in r.prompt for r in ro.verifier_reqs.values())
    assert all(c[0].text.endswith(f"verdict: {ro.items[i].pair.preferred}") for (i, _), c in ro.verifier.items())


def test_the_teacher_forced_readout_scores_each_part_of_the_evidence_lines(tmp_path):
    """``bars.evidence_readout`` (recorded with every oracle measure of a warm start to a bar): a model whose argmax is
    the target's next token scores 1 on values, marks, favours and verdicts; one that always predicts the same token
    scores what that token happens to match; the reading line is not evidence."""
    import torch

    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.methods.deltarubric.bars import READOUT_PARTS, evidence_readout, target_parts
    from rubricflow.methods.deltarubric.examples import pair_tokenizer_corpus

    pairs = build_pairs(tmp_path, ["barchart"], {"val": 6}, seed=4, partial_frac=0.5, form="wide")
    for form, tally in (("quoted", False), ("restated", False), ("quoted", True)):
        dr = DeltaRubricConfig(sft=DRSFTConfig(evidence_form=form, perception_images=8, evidence_tally=tally))
        _, tok = build_tiny_text(pair_tokenizer_corpus(pairs, dr.sft), TinyDims(hidden_size=16, num_layers=1,
                                                                                 num_heads=2, num_kv_heads=1,
                                                                                 vocab_size=400), seed=0)

        class Proc:
            tokenizer = tok

            def chat_prompt(self, text, n_images=0, images_last=False):
                return f"<user>{text}<assistant>"

        class Oracle(torch.nn.Module):  # the argmax at position j is the token at j + 1
            def forward(self, input_ids, attention_mask, **_):
                nxt = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], dim=1)
                return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, len(tok)).float()})()

        class Yes(Oracle):
            def forward(self, input_ids, attention_mask, **_):
                ids = torch.full_like(input_ids, tok(" yes", add_special_tokens=False)["input_ids"][-1])
                return type("Out", (), {"logits": torch.nn.functional.one_hot(ids, len(tok)).float()})()

        items = [Item(p, []) for p in pairs]
        parts = [p for p in READOUT_PARTS if tally or p != "tally"]  # the running verdict only where it is written
        assert evidence_readout(dr, items, Oracle(), Proc()) == {f"tf_{p}": 1.0 for p in parts}
        yes = evidence_readout(dr, items, Yes(), Proc())
        assert yes["tf_value"] == yes["tf_favour"] == yes["tf_verdict"] == 0.0 and 0.0 < yes["tf_mark"] < 1.0
        assert yes.get("tf_tally", 0.0) == 0.0
    text = "C = 3, K = 6.\n1. image K = 6, A K = 5 no, B K = 6 yes -> B\nverdict: B"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    got = [(tok.decode([i]).strip(), p) for i, p in zip(ids, target_parts(tok, text, ids)) if p]
    assert got == [("6", "value"), ("5", "value"), ("no", "mark"), ("6", "value"), ("yes", "mark"),
                   ("B", "favour"), ("B", "verdict")]
    text = "1. image K = 6, A K = 5 no, B K = 6 yes -> B, so far B\nverdict: B"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    got = [(tok.decode([i]).strip(), p) for i, p in zip(ids, target_parts(tok, text, ids)) if p]
    assert got == [("6", "value"), ("5", "value"), ("no", "mark"), ("6", "value"), ("yes", "mark"),
                   ("B", "favour"), ("B", "tally"), ("B", "verdict")]  # the tally token only is new


def test_the_tool_needs_reading_examples_and_names_itself_in_a_study_units_inputs(tmp_path):
    from rubricflow.config import config_from_dict
    from rubricflow.methods.deltarubric.bars import target_parts
    from rubricflow.methods.deltarubric.study import _input_parts
    from rubricflow.study.adapter import Unit

    with pytest.raises(ValueError, match="evidence_form=quoted.*perception_images > 0"):
        DRSFTConfig(evidence_form="quoted", perception_images=0)
    parts = {}
    for form in ("keyed", "quoted"):
        cfg = config_from_dict({"deltarubric": {"sft": {"evidence_form": form, "perception_images": 8,
                                                        "out_dir": str(tmp_path / "none")},
                                                "pairs": {"out_dir": str(tmp_path / "none")}}})
        parts[form] = _input_parts(cfg, Unit("deltarubric", 1))["config"]
    assert "verifier_quotes" not in parts["keyed"] and parts["quoted"]["verifier_quotes"] is True

    class Chars:  # one token per character
        def decode(self, ids):
            return "".join(chr(i) for i in ids)

    text = "1. image P = (1, 2), A P = (1, 3) no, B P = (1, 2) yes -> B"
    got = target_parts(Chars(), text, [ord(c) for c in text])
    assert "".join(c for c, p in zip(text, got) if p == "value") == "(1,2)(1,3)(1,2)"  # a tuple is one value
