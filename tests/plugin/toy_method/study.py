from pathlib import Path
from typing import Any

from rubricflow.registry import StudyDecl
from rubricflow.study.adapter import StudyMethod, Unit
from rubricflow.study.spec import Claim, StudySpec
from tests.plugin.toy_method.logic import count


def run_unit(ucfg: Any, unit: Unit, udir: Path, run: Any, secret_resolver=None) -> dict:
    out = count(ucfg.toy.n, ucfg.toy.scale, unit.seed, ucfg.toy.out_dir)
    return {"metrics": {"score": out["score"]}, "eval_samples": out["steps"]}


ADAPTER = StudyMethod(
    name="toy",
    run_unit=run_unit,
    unit_overrides=lambda vcfg, name, spec, unit, udir: {"toy.out_dir": str(udir / "out")},
    reserved_keys=("toy.out_dir",),
    shared_outputs=lambda cfg: {},
    input_parts=lambda ucfg, unit: {"toy": ucfg.toy.model_dump(mode="json"), "seed": unit.seed},
    code=("tests.plugin.toy_method",),
    sections=("toy",),
    shared_hint="nothing is shared",
)


def toy_spec() -> StudySpec:
    return StudySpec(method="toy", seeds=[1, 2, 3, 4, 5], variants={"small": {"toy.scale": 1.0},
                                                                    "big": {"toy.scale": 2.0}},
                     metrics=["score"], claims=[Claim(a="big", b="small", metric="score", direction="higher")],
                     out_dir="artifacts/studies/toy")


STUDIES = (StudyDecl("toy", toy_spec, "Big steps score more than small ones."),)
