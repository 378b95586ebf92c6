"""Shared by the study harness tests: a throw-away project's config (its own six-variant study, independent of
RuCL's defaults), its shared outputs, and a fake unit with a per-variant effect and a seed-dependent wobble."""

from rubricflow.config import config_from_dict

# The harness tests' own study (independent of RuCL's defaults): six variants, four claims, the shared start.
HARNESS_STUDY = {
    "variants": {"sft": {}, "outcome": {"rucl.reward.mode": "outcome"}, "uniform": {"rucl.reward.mode": "uniform"},
                 "rucl-sigmoid": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "sigmoid"},
                 "rucl-linear": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "linear"},
                 "shuffled": {"rucl.reward.mode": "rucl", "rucl.reward.shuffle_control": True}},
    "untrained": ["sft"],
    "metrics": ["accuracy", "correct_but_flawed", "correct_but_flawed_rubric", "s_f", "s_a"],
    "claims": [{"a": "rucl-sigmoid", "b": "outcome", "metric": "accuracy", "direction": "higher"},
               {"a": "rucl-sigmoid", "b": "uniform", "metric": "accuracy", "direction": "higher"},
               {"a": "rucl-sigmoid", "b": "outcome", "metric": "correct_but_flawed", "direction": "lower"},
               {"a": "rucl-sigmoid", "b": "shuffled", "metric": "accuracy", "direction": "higher"}],
    "per_seed_start": False,
}


def harness_cfg(tmp_path, study=None, **top):
    raw = {
        "reports_dir": str(tmp_path / "reports"),
        "data": {"out_dir": str(tmp_path / "data")},
        "rubrics": {"pool_path": str(tmp_path / "candidates.json")},
        "rucl": {"init_from": str(tmp_path / "sft"), "tiers_path": str(tmp_path / "tiers.json"),
                 "checkpoint_dir": str(tmp_path / "ckpt" / "rucl")},
        "study": {"rucl": {**HARNESS_STUDY, "seeds": [11, 22, 33], "out_dir": str(tmp_path / "studies" / "rucl"),
                           "report_dir": str(tmp_path / "reports" / "studies"), **(study or {})}},
        **top,
    }
    return config_from_dict(raw)


def make_shared(tmp_path):
    from rubricflow.data.validate import stamp_path

    stamp = stamp_path(tmp_path / "reports", tmp_path / "data").relative_to(tmp_path)
    for p in ("data/manifest.json", str(stamp), "candidates.json", "sft/config.json", "tiers.json"):
        f = tmp_path / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")


# Per-variant effect on accuracy and a seed-dependent wobble: rucl-sigmoid beats outcome by 0.1 +- 0.01 on every
# seed, uniform and rucl-sigmoid are equal up to +-0.02 wobble, and rucl-sigmoid has *more* flawed answers.
BASE = {"sft": 0.40, "outcome": 0.45, "uniform": 0.55, "rucl-sigmoid": 0.55, "rucl-linear": 0.50, "shuffled": 0.30}
WOBBLE = {11: 0.01, 22: -0.01, 33: 0.0}


class FakeUnit:
    def __init__(self, wobble=None, fail_on=None):
        self.calls, self.fail_on, self.wobble = [], fail_on, wobble or WOBBLE

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        self.calls.append(unit.key)
        if unit.key == self.fail_on:
            raise RuntimeError("killed")
        assert ucfg.seed == unit.seed and str(udir) in ucfg.rucl.out_dir
        w = self.wobble[unit.seed] * (1 if unit.variant != "uniform" else -1)
        flawed = 0.3 + (0.1 if unit.variant == "rucl-sigmoid" else 0.0) + self.wobble[unit.seed]
        return {"metrics": {"accuracy": BASE[unit.variant] + w, "correct_but_flawed": flawed, "s_f": 0.9,
                            "s_a": None}, "eval_samples": 12}
