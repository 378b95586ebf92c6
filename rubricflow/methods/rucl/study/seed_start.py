"""RuCL's start per seed (``study.<name>.per_seed_start``): a seed that covers the chain trains its own base model and
SFT warm start and calibrates its own tiers, shared by the seed's variants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricflow.study.adapter import SeedStart
from rubricflow.training.policy_start import build_base, warm_start
from rubricflow.util.hashing import content_hash


def start_overrides(vcfg: Any, sdir: Path) -> dict[str, Any]:
    return {"rucl.init_from": str(sdir / "sft"), "rucl.tiers_path": str(sdir / "tiers.json")}


def start_inputs(ucfg: Any, seed: int) -> dict[str, Any]:
    return {"config": {"models": ucfg.models.essential_dump(), "sft": ucfg.sft.essential_dump(),
                       "rubrics": ucfg.rubrics.input_dump(),
                       "judge": ucfg.judge.essential_dump(), "generation": ucfg.generation.essential_dump(),
                       "data": ucfg.data.essential_dump()},
            "seed": seed, "data_set": content_hash(ucfg.data.out_dir), "pool": content_hash(ucfg.rubrics.pool_path)}


def build_start(ucfg: Any, seed: int, build_dir: Path, final_dir: Path) -> dict:
    """The seed's base model and SFT warm start (the foundation's recipe with the seed), then its tiers calibrated on
    that start (the stratify stage's recipe); returns the start's val accuracy per task and the tiers."""
    from rubricflow.methods.rucl.rubrics.build import stratify_pool  # build loads torch (policy sampling)

    build_base(ucfg.models, ucfg.data, build_dir / "base", seed)
    sft, _ = warm_start(ucfg.sft, ucfg.models, ucfg.data, ucfg.generation, build_dir / "base", build_dir / "sft", seed)
    rubrics = ucfg.rubrics.model_copy(update={"policy_path": str(build_dir / "sft"),
                                              "tiers_path": str(build_dir / "tiers.json"),
                                              "table_dir": str(build_dir / "rubrics")})
    strat = stratify_pool(rubrics, ucfg.judge, ucfg.data.out_dir, seed=seed)
    rows = strat.get("rows") or []
    tiers = {tier: "/".join(f"{r['id']}:{r['pass_rate']:.2f}" for r in rows if r.get("tier") == tier)
             for tier in ("foundational", "advanced")}
    return {**{f"sft_val_{k}": v for k, v in sft["accuracy_after"].items()},
            "tiers_foundational": tiers["foundational"], "tiers_advanced": tiers["advanced"],
            "pass_foundational": strat["metrics"].get("mean_pass_foundational"),
            "pass_advanced": strat["metrics"].get("mean_pass_advanced")}


SEED_START = SeedStart(overrides=start_overrides, inputs=start_inputs, build=build_start,
                       code=("rubricflow.training.policy_start", "rubricflow.training.sft",
                             "rubricflow.methods.rucl.rubrics", "rubricflow.judge", "models.tiny"))
