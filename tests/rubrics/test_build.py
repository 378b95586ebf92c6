"""stratify_pool end to end on a synthetic calibration split: gold traces mixed with corrupted ones as the
"policy" (an untrained tiny policy only produces garbage), programmatic judge, files written, both tiers."""

import csv
import json
import re

import pytest

from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.traces import render_trace
from rubricflow.judge import JudgeConfig
from rubricflow.methods.rucl.rubrics import RubricsConfig, load_tiers, write_pool, stratify_pool

N_PER_TASK = 16


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("calib")
    build_synthetic_dataset(
        d, ["counting", "barchart", "geometry"], {"calib": N_PER_TASK, "train": 1}, seed=7, image_size=56
    )
    return d


def variants(sample) -> list[str]:
    """gold; first value read off the image wrong; no boxed answer; bare answer without reasoning; wrong and
    no box."""
    gold = render_trace(sample.facts, sample.answer)
    k, v = sample.facts["perception"][0]
    wrong_v = f"({v[0] + 1}, {v[1]})" if isinstance(v, list) else str(v + 1)
    wrong = re.sub(rf"^{k} = [^,.]+(\)|)", f"{k} = {wrong_v}", gold, count=1)
    assert wrong != gold
    no_box = gold[: gold.rfind("\\boxed")].strip()
    wrong_no_box = wrong[: wrong.rfind("\\boxed")].strip()
    return [gold, wrong, no_box, f"\\boxed{{{sample.answer}}}", wrong_no_box]


def responder(samples):
    return [variants(s) for s in samples]


def cfg(tmp_path, **kw):
    base = dict(
        pool_path=str(tmp_path / "candidates.json"),
        tiers_path=str(tmp_path / "tiers.json"),
        table_dir=str(tmp_path / "reports"),
    )
    return RubricsConfig(**{**base, **kw})


def test_stratify_pool_on_gold_and_corrupted_responses(dataset, tmp_path):
    rc = cfg(tmp_path)
    write_pool(rc)
    res = stratify_pool(rc, JudgeConfig(), dataset, responder=responder)
    m = res["metrics"]
    n = 3 * N_PER_TASK * 5
    assert m["n_judgments"] == n and m["n_judge_ok"] == n and m["n_judge_failed"] == 0
    assert m["n_candidates"] == 20 and m["n_kept"] == 6
    assert m["n_foundational"] >= 1 and m["n_advanced"] >= 1 and m["n_foundational"] + m["n_advanced"] == 6
    assert m["mean_pass_foundational"] > m["mean_pass_advanced"]

    rows = {r["id"]: r for r in json.loads((tmp_path / "reports" / "stratification.json").read_text())}
    # hand-countable rows: two of the five variants per prompt have no box
    assert rows["C17"]["coverage"] == 1.0 and rows["C17"]["pass_rate"] == 0.6
    # the counts rubric applies to the counting third; per prompt gold and no-box pass, the other three fail
    assert rows["C05"]["coverage"] == pytest.approx(1 / 3) and rows["C05"]["pass_rate"] == 0.4
    assert rows["C01"]["pass_rate"] == 0.4 and rows["C02"]["pass_rate"] == 0.8
    # the deliberately narrow candidates are dropped by coverage, whatever their pass rate
    for cid in ("C03", "C09", "C16"):
        assert not rows[cid]["kept"] and rows[cid]["drop_reason"].startswith("low coverage"), rows[cid]
        assert rows[cid]["coverage"] < rc.coverage_min
    kept = [r for r in rows.values() if r["kept"]]
    assert sorted(r["rank"] for r in kept) == [1, 2, 3, 4, 5, 6]
    assert all(r["tier"] in ("foundational", "advanced") for r in kept)
    assert all(r["tier"] is None for r in rows.values() if not r["kept"])
    # the threshold rule (default): foundational iff the calibration pass rate >= foundational_min_pass. Here the
    # six most applicable rubrics all pass >= 0.6 on these responses, so the clamp moves the lowest-pass one (C17,
    # 0.6) to advanced: both tiers exist
    assert rc.tier_rule == "threshold" and rc.foundational_min_pass == 0.6
    ranked = sorted(kept, key=lambda r: (-r["pass_rate"], r["id"]))
    assert all(r["pass_rate"] >= 0.6 for r in kept)
    assert [r["tier"] for r in ranked] == ["foundational"] * 5 + ["advanced"] and ranked[-1]["id"] == "C17"
    assert not rows["C01"]["kept"]  # applicable to fewer responses than the six kept (coverage ranking)

    with open(tmp_path / "reports" / "stratification.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 20 and table[0]["id"] == "C01" and "coverage" in table[0] and "tier" in table[0]
    summary = json.loads((tmp_path / "reports" / "stratification_summary.json").read_text())
    assert summary == m and all(isinstance(v, (int, float)) for v in summary.values())

    tiers = load_tiers(res["paths"]["tiers"])
    assert len(tiers) == 6 and {r.tier for r in tiers} == {"foundational", "advanced"}
    assert [r.tier for r in tiers] == sorted((r.tier for r in tiers), key=lambda t: t != "foundational")
    doc = json.loads((tmp_path / "tiers.json").read_text())
    assert doc["provenance"]["source"] == "default pool v1"
    assert doc["provenance"]["stratification"]["keep_k"] == 6
    assert doc["provenance"]["stratification"]["ranking"] == "coverage, then pass rate, then id"  # what rank_by did
    assert doc["provenance"]["stratification"]["judge"] == "programmatic:programmatic:checks-v3+problem"
    assert all("coverage" in r and "pass_rate" in r for r in doc["rubrics"])


def test_teacher_rubrics_with_the_programmatic_judge_fail_before_sampling(dataset, tmp_path):
    rc = cfg(tmp_path)
    (tmp_path / "candidates.json").write_text(
        json.dumps(
            {
                "rubrics": [
                    {"id": "T01", "text": "A rubric with no checker.", "category": "logical_coherence"},
                    {"id": "T02", "text": "Another one without a checker.", "category": "visual_faithfulness"},
                ]
            }
        )
    )
    called = []
    with pytest.raises(ValueError, match=r"no checker for rubric\(s\) T01 \(check=None\), T02"):
        stratify_pool(rc, JudgeConfig(), dataset, responder=lambda s: called.append(1))
    assert called == []


@pytest.mark.slow
def test_stratify_pool_samples_from_a_policy_checkpoint(dataset, tmp_path):
    """The real sampling path: load_policy + TransformersGenerator on a (random) tiny Qwen2.5-VL."""
    from models.tiny import TinyDims, build_tiny_vl, save

    corpus = [render_trace({"perception": [["red", 2]], "task": "counting", "target": "red"}, "2")] * 20
    model, proc = build_tiny_vl(corpus, TinyDims(hidden_size=64, num_heads=2, num_kv_heads=1, vocab_size=320))
    policy = save(model, proc, tmp_path / "policy")
    rc = cfg(tmp_path, policy_path=str(policy), calib_max_prompts=3, samples_per_prompt=2, max_new_tokens=8)
    write_pool(rc)
    res = stratify_pool(rc, JudgeConfig(), dataset, seed=3)
    assert (
        res["metrics"]["n_judgments"] == 6 and res["rule"]["n_prompts"] == 3 and res["rule"]["samples_per_prompt"] == 2
    )
    rows = json.loads((tmp_path / "reports" / "stratification.json").read_text())
    # the box rubric applies to every response, whatever the (random) policy wrote
    c17 = next(r for r in rows if r["id"] == "C17")
    assert c17["n_judged"] == 6 and c17["coverage"] == 1.0
