"""prefect.yaml's deployments: every entrypoint loads, its parameters are valid for the flow's typed form, and the
study and compare deployments exist with the fields a user fills in (the study form takes the Ray address)."""

from __future__ import annotations

import importlib

import yaml

from tests.ops_helpers import ROOT


def _deployments() -> dict[str, dict]:
    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["name"]: d for d in doc["deployments"]}


def _schema(entrypoint: str) -> dict:
    from prefect.utilities.callables import parameter_schema

    path, func = entrypoint.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return parameter_schema(getattr(module, func)).model_dump_for_openapi()


def test_every_deployment_fills_its_flows_form():
    from prefect.utilities.schema_tools.validation import validate

    for name, d in _deployments().items():
        schema = _schema(d["entrypoint"])
        assert set(d.get("parameters") or {}) <= set(schema["properties"]), name
        assert not validate(d.get("parameters") or {}, schema, raise_on_error=False), name


def test_study_and_compare_deployments_have_typed_forms():
    deps = _deployments()
    study = _schema(deps["study-local"]["entrypoint"])["properties"]
    assert {"name", "profile", "seeds", "variants", "ray", "fan_out"} <= set(study)
    assert "Ray" in study["ray"]["description"]
    compare = _schema(deps["compare-local"]["entrypoint"])
    props = compare["properties"]
    assert {"stage", "pipeline", "metrics", "experiment"} <= set(props)
    stage_choices = props["stage"].get("enum") or compare["definitions"][props["stage"]["$ref"].split("/")[-1]]["enum"]
    assert {"rucl", "rucl_outcome", "deltarubric_train"} <= set(stage_choices)
