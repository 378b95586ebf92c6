"""The deployable infrastructure files parse and hold together: compose, Kubernetes manifests, the work pool
template, Helm values, DeepSpeed hostfile/config/launcher, prefect.yaml. Docker, Kubernetes and GPUs are not
available here; see tests/infra_checks.py for what is checked and which real validators are used. Each checker
also runs on deliberately broken copies, to show it reports what it claims to."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from tests import infra_checks as ic

ROOT = ic.ROOT
INFRA = ic.INFRA
COMPOSE = INFRA / "docker-compose.yml"
TEMPLATE = INFRA / "k8s" / "work-pool-template.json"
HOSTFILE = INFRA / "deepspeed" / "hostfile"
DS_CONFIG = INFRA / "deepspeed" / "zero3_bf16.json"
LAUNCH = INFRA / "deepspeed" / "launch.sh"
PREFECT_YAML = ROOT / "prefect.yaml"
HELM_VALUES = INFRA / "helm" / "prefect-worker-values.yaml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return ic.load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def k8s_docs() -> list[tuple[str, dict]]:
    return [
        (str(p.relative_to(ROOT)), d) for p in sorted((INFRA / "k8s").glob("*.yaml")) for d in ic.load_yaml_all(p)
    ]


@pytest.fixture(scope="module")
def template() -> dict:
    return json.loads(TEMPLATE.read_text())


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return ic.load_yaml(PREFECT_YAML)


def _has(problems: list[str], fragment: str) -> bool:
    return any(fragment in p for p in problems)


def _broken(doc, mutate):
    """A deep copy of ``doc`` changed by ``mutate`` (which edits in place)."""
    broken = copy.deepcopy(doc)
    mutate(broken)
    return broken


# ----------------------------------------------------------------------------------------------------------------
# Helpers of the checkers, on hand-computed cases


def test_interpolate_follows_compose_rules():
    env = {"SET": "v", "EMPTY": ""}
    assert ic.interpolate("${SET:-d}/${EMPTY:-d}/${UNSET:-d}", env) == "v/d/d"
    assert ic.interpolate("${EMPTY-d}/${UNSET-d}", env) == "/d"
    assert ic.interpolate("${SET:+alt}/${EMPTY:+alt}/${EMPTY+alt}", env) == "alt//alt"
    assert ic.interpolate("cost $$5 ${SET}", env) == "cost $5 v"
    with pytest.raises(ic.MissingVariable, match="PW is required: set PW"):
        ic.interpolate("${PW:?set PW}", env)
    with pytest.raises(ic.MissingVariable):
        ic.interpolate("${EMPTY:?x}", env)
    assert ic.interpolate("${EMPTY?x}", env) == ""


@pytest.mark.parametrize(
    "value, ok",
    [
        ("${PW}", True),
        ("${PW:?set it}", True),
        ("${PW:-}", True),
        ("${PW:-hunter2}", False),
        ("hunter2", False),
        ("x${PW}", False),
        (42, False),
    ],
)
def test_secret_placeholder(value, ok):
    assert ic.is_secret_placeholder(value) is ok


@pytest.mark.parametrize(
    "entry, ok",
    [
        (4200, True),
        ("4200", True),
        ("8080:80", True),
        ("127.0.0.1:5000:5000", True),
        ("${RUBRICFLOW_BIND:-127.0.0.1}:9000:9000", True),
        ("9000-9001:9000-9001/tcp", True),
        ({"target": 80, "published": "8080"}, True),
        (0, False),
        (70000, False),
        ("4200:99999", False),
        ("999.1.1.1:80:80", False),
        ("http:80", False),
        ("80/icmp", False),
        (True, False),
        ({"published": 80}, False),
    ],
)
def test_check_port(entry, ok):
    assert (ic.check_port(entry) is None) is ok


# ----------------------------------------------------------------------------------------------------------------
# docker compose


def test_compose_passes_checks(compose):
    assert ic.check_compose(compose) == []
    assert ic.REQUIRED_SERVICES <= set(compose["services"])


def test_compose_wiring(compose):
    s = compose["services"]
    worker, mlflow = ic.service_env(s["worker"]), ic.service_env(s["mlflow"])
    assert worker["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert worker["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert worker["JUDGE_API_KEY"] == "${JUDGE_API_KEY:-}"  # the same key the judge requires
    assert mlflow["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    # The bucket the init job creates is the one MLflow writes to.
    bucket = ic.interpolate(ic.service_env(s["minio-init"])["MLFLOW_BUCKET"])
    assert ic.interpolate(mlflow["MLFLOW_ARTIFACTS_DESTINATION"]) == f"s3://{bucket}/"
    assert s["mlflow"]["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    # Both servers use the databases the init script creates, with the password from the environment.
    env = {"POSTGRES_PASSWORD": "pw"}
    prefect_db = ic.interpolate(ic.service_env(s["prefect-server"])["PREFECT_API_DATABASE_CONNECTION_URL"], env)
    mlflow_db = ic.interpolate(mlflow["MLFLOW_BACKEND_STORE_URI"], env)
    assert prefect_db == "postgresql+asyncpg://rubricflow:pw@postgres:5432/prefect"
    assert mlflow_db == "postgresql://rubricflow:pw@postgres:5432/mlflow"
    init_sql = (INFRA / "postgres" / "init-databases.sql").read_text()
    assert set(re.findall(r"CREATE DATABASE (\w+);", init_sql)) == {"prefect", "mlflow"}
    # The worker runs the flows in the image's project root, where its volumes are mounted.
    assert worker["RUBRICFLOW_ROOT"] == "/app"
    assert {v.split(":")[1] for v in s["worker"]["volumes"]} == {"/app/.rubricflow", "/app/artifacts", "/app/data"}


def test_compose_refuses_to_start_without_secrets(compose):
    url = ic.service_env(compose["services"]["mlflow"])["MLFLOW_BACKEND_STORE_URI"]
    with pytest.raises(ic.MissingVariable, match="POSTGRES_PASSWORD"):
        ic.interpolate(url, {})
    judge_key = ic.service_env(compose["services"]["judge"])["VLLM_API_KEY"]
    with pytest.raises(ic.MissingVariable, match="JUDGE_API_KEY"):
        ic.interpolate(judge_key, {})


def test_compose_judge_is_a_gpu_vllm_server(compose):
    judge = compose["services"]["judge"]
    assert judge["profiles"] == ["gpu"]
    args = [ic.interpolate(a) for a in judge["entrypoint"] + judge["command"]]
    assert args[:3] == ["vllm", "serve", "Qwen/Qwen2.5-VL-72B-Instruct"]
    assert {"--tensor-parallel-size=4", "--max-model-len=32768", "--gpu-memory-utilization=0.90"} <= set(args)
    device = judge["deploy"]["resources"]["reservations"]["devices"][0]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    # A smaller judge is a matter of environment variables.
    small = {"JUDGE_MODEL": "Qwen/Qwen2.5-VL-7B-Instruct", "JUDGE_TENSOR_PARALLEL_SIZE": "1"}
    assert [ic.interpolate(a, small) for a in judge["command"][:4]] == [
        "Qwen/Qwen2.5-VL-7B-Instruct", "--host=0.0.0.0", "--port=8000", "--tensor-parallel-size=1",
    ]


def test_compose_pins_project_versions(compose):
    prefect_version = version("prefect")
    assert compose["services"]["prefect-server"]["image"] == f"prefecthq/prefect:{prefect_version}-python3.11"
    mlflow_docker = (INFRA / "docker" / "mlflow.Dockerfile").read_text()
    assert f'"mlflow=={version("mlflow")}"' in mlflow_docker
    assert compose["services"]["mlflow"]["image"] == f"rubricflow-mlflow:{version('mlflow')}"


def _set_env(name: str, key: str, value):
    def mutate(doc):
        doc["services"][name]["environment"][key] = value

    return mutate


def _drop(path: list[str]):
    def mutate(doc):
        node = doc
        for p in path[:-1]:
            node = node[p]
        del node[path[-1]]

    return mutate


def _append(path: list[str], value):
    def mutate(doc):
        node = doc
        for p in path:
            node = node.setdefault(p, [] if p == path[-1] else {})
        node.append(value)

    return mutate


def _set(path: list[str], value):
    def mutate(doc):
        node = doc
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return mutate


COMPOSE_BREAKAGES = {
    "undeclared volume": (
        _append(["services", "worker", "volumes"], "scratch:/scratch"),
        "services.worker.volumes: named volume 'scratch' is not declared",
    ),
    "unused volume": (_set(["volumes", "orphan"], None), "volume 'orphan' is declared but no service uses it"),
    "undefined dependency": (
        _set(["services", "worker", "depends_on", "redis"], {"condition": "service_started"}),
        "services.worker.depends_on: 'redis' is not a defined service",
    ),
    "literal password": (
        _set_env("postgres", "POSTGRES_PASSWORD", "hunter2"),
        "services.postgres.environment: POSTGRES_PASSWORD holds a literal value",
    ),
    "password as a default": (
        _set_env("minio", "MINIO_ROOT_PASSWORD", "${MINIO_ROOT_PASSWORD:-minio123}"),
        "MINIO_ROOT_PASSWORD holds a literal value",
    ),
    "password inside a URL": (
        _set_env("mlflow", "MLFLOW_BACKEND_STORE_URI", "postgresql://rubricflow:hunter2@postgres:5432/mlflow"),
        "URL password 'hunter2' is literal",
    ),
    "key on the command line": (
        _append(["services", "judge", "command"], "--api-key=sk-123"),
        "literal secret on the command line",
    ),
    "no healthcheck": (_drop(["services", "mlflow", "healthcheck"]), "services.mlflow: no healthcheck"),
    "bad port": (_set(["services", "prefect-server", "ports"], ["4200:99999"]), "has a port outside 1..65535"),
    "telemetry on": (
        _drop(["services", "judge", "environment", "VLLM_NO_USAGE_STATS"]),
        "services.judge.environment: VLLM_NO_USAGE_STATS must be '1'",
    ),
    "missing service": (_drop(["services", "judge"]), "missing services ['judge']"),
    "judge without GPU": (_drop(["services", "judge", "deploy"]), "needs deploy.resources.reservations.devices"),
    "tensor parallel vs GPUs": (
        lambda doc: doc["services"]["judge"]["deploy"]["resources"]["reservations"]["devices"][0].update({"count": 1}),
        "--tensor-parallel-size 4 does not match the 1 GPU(s) reserved",
    ),
}


@pytest.mark.parametrize("case", sorted(COMPOSE_BREAKAGES))
def test_compose_checker_reports_breakage(compose, case):
    mutate, expected = COMPOSE_BREAKAGES[case]
    problems = ic.check_compose(_broken(compose, mutate), "broken-compose.yml")
    assert _has(problems, expected), problems
    assert all(p.startswith("broken-compose.yml") for p in problems)


def test_compose_checker_reports_dependency_on_unhealthy_service(compose):
    problems = ic.check_compose(_broken(compose, _drop(["services", "prefect-server", "healthcheck"])))
    assert _has(problems, "services.worker.depends_on.prefect-server: waits for service_healthy but prefect-server "
                          "has no healthcheck")


def _docker_compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(
    not _docker_compose_available(),
    reason="the docker client or its compose plugin is not installed (`docker compose version` fails)",
)
def test_docker_compose_config_validates():
    env = {
        **os.environ,
        "POSTGRES_PASSWORD": "test-only",
        "MINIO_ROOT_USER": "test-only",
        "MINIO_ROOT_PASSWORD": "test-only",
        "JUDGE_API_KEY": "test-only",
    }
    cmd = ["docker", "compose", "-f", str(COMPOSE), "--profile", "gpu", "config", "-q"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr


# ----------------------------------------------------------------------------------------------------------------
# Kubernetes manifests


def test_k8s_manifests_pass_checks(k8s_docs):
    assert ic.check_k8s(k8s_docs) == []
    kinds = sorted((d["kind"], d["metadata"]["name"]) for _, d in k8s_docs)
    assert kinds == [
        ("Deployment", "rubricflow-judge"),
        ("Namespace", "rubricflow"),
        ("PersistentVolumeClaim", "rubricflow-judge-model-cache"),
        ("PersistentVolumeClaim", "rubricflow-state"),
        ("Secret", "rubricflow-judge"),
        ("Service", "judge"),
    ]
    assert {d["metadata"].get("namespace") for _, d in k8s_docs if d["kind"] != "Namespace"} == {"rubricflow"}


def _judge(k8s_docs) -> dict:
    return next(d for _, d in k8s_docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "rubricflow-judge")


def test_k8s_judge_serves_a_real_model_on_gpus(k8s_docs):
    judge = _judge(k8s_docs)
    assert ic.check_judge_deployment(judge, "judge") == []
    c = judge["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][0] == "Qwen/Qwen2.5-VL-72B-Instruct"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "--tensor-parallel-size=4" in c["args"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in judge["spec"]["template"]["spec"]["volumes"]}
    assert volumes["model-cache"]["persistentVolumeClaim"]["claimName"] == "rubricflow-judge-model-cache"
    hf_home = next(e["value"] for e in c["env"] if e["name"] == "HF_HOME")
    assert hf_home.startswith(mounts["model-cache"] + "/")


def test_k8s_secret_is_a_template(k8s_docs):
    secret = next(d for _, d in k8s_docs if d["kind"] == "Secret")
    assert "data" not in secret
    filled = {k: ic.interpolate(v, {"JUDGE_API_KEY": "k-123"}) for k, v in secret["stringData"].items()}
    # envsubst fills both keys with the one judge key: the server's and the judge backend's.
    assert filled == {"VLLM_API_KEY": "k-123", "JUDGE_API_KEY": "k-123"}


def _mutate_judge(mutate):
    def apply(docs):
        mutate(next(d for _, d in docs if d["kind"] == "Deployment"))

    return apply


def _judge_container(d):
    return d["spec"]["template"]["spec"]["containers"][0]


K8S_BREAKAGES = {
    "selector does not match": (
        _mutate_judge(lambda d: d["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "other"})),
        "does not match the pod template labels",
    ),
    "service selects nothing": (
        _mutate_judge(lambda d: d["spec"]["template"]["metadata"]["labels"].update({"app.kubernetes.io/name": "x"})),
        "Service/judge: selector {'app.kubernetes.io/name': 'rubricflow-judge'} matches no Deployment's pods",
    ),
    "no readiness probe": (
        _mutate_judge(lambda d: _judge_container(d).pop("readinessProbe")),
        "containers.vllm: readinessProbe missing",
    ),
    "probe on an unknown port": (
        _mutate_judge(lambda d: _judge_container(d)["readinessProbe"]["httpGet"].update({"port": "metrics"})),
        "httpGet port 'metrics' names no containerPort",
    ),
    "claim not defined": (
        _mutate_judge(lambda d: d["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"].update(
            {"claimName": "nope"})),
        "claim 'nope' is not a PersistentVolumeClaim here",
    ),
    "unpinned image": (
        _mutate_judge(lambda d: _judge_container(d).update({"image": "vllm/vllm-openai"})),
        "image 'vllm/vllm-openai' has no tag",
    ),
    "secret key missing": (
        _mutate_judge(lambda d: _judge_container(d)["env"][0]["valueFrom"]["secretKeyRef"].update({"key": "API"})),
        "secret 'rubricflow-judge' has no key 'API'",
    ),
    "bad quantity": (
        _mutate_judge(lambda d: _judge_container(d)["resources"]["requests"].update({"memory": "lots"})),
        "resources.requests.memory: 'lots' is not a Kubernetes quantity",
    ),
    "literal secret": (
        lambda docs: next(d for _, d in docs if d["kind"] == "Secret")["stringData"].update({"VLLM_API_KEY": "sk-1"}),
        "stringData.VLLM_API_KEY is literal",
    ),
    "wrong apiVersion": (
        _mutate_judge(lambda d: d.update({"apiVersion": "extensions/v1beta1"})),
        "apiVersion 'extensions/v1beta1'; Deployment is 'apps/v1'",
    ),
    "unexpected kind": (
        lambda docs: docs.append(("extra.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})),
        "unexpected kind 'Pod'",
    ),
    "missing name": (
        lambda docs: docs.append(("extra.yaml", {"apiVersion": "v1", "kind": "Service", "metadata": {}})),
        "extra.yaml: Service/None: needs apiVersion, kind and metadata.name",
    ),
}


@pytest.mark.parametrize("case", sorted(K8S_BREAKAGES))
def test_k8s_checker_reports_breakage(k8s_docs, case):
    mutate, expected = K8S_BREAKAGES[case]
    problems = ic.check_k8s(_broken(k8s_docs, mutate))
    assert _has(problems, expected), problems


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c["resources"]["limits"].pop("nvidia.com/gpu"),
         "resources.limits['nvidia.com/gpu'] must be an integer >= 1"),
        (lambda c: c["readinessProbe"]["httpGet"].update({"path": "/v1/models"}),
         "readinessProbe must be httpGet on /health"),
        (lambda c: c["args"].__setitem__(0, "--model"), "first positional argument must be a model id"),
        (lambda c: c["args"].remove("--max-model-len=32768"), "--max-model-len must be set"),
        (lambda c: c["args"].append("--gpu-memory-utilization=1.5"), "--gpu-memory-utilization must be in (0, 1]"),
    ],
)
def test_judge_checker_reports_breakage(k8s_docs, mutate, expected):
    judge = _broken(_judge(k8s_docs), lambda d: mutate(_judge_container(d)))
    assert _has(ic.check_judge_deployment(judge, "judge"), expected)


# ----------------------------------------------------------------------------------------------------------------
# Kubernetes work pool base job template


def test_work_pool_template_passes_checks(template):
    from prefect.utilities.templating import find_placeholders

    assert ic.check_work_pool_template(template) == []
    used = {p.name for p in find_placeholders(template["job_configuration"])}
    assert used == set(template["variables"]["properties"])
    assert template["variables"]["required"] == ["image", "mlflow_tracking_uri"]


def test_work_pool_template_renders_the_k8s_deployment(template, prefect_yaml):
    """What the worker builds for `rucl-gpu`: deployment job variables (env placeholders resolved as at
    `prefect deploy`) over the template defaults."""
    from prefect.utilities.templating import apply_values

    deployment = next(d for d in prefect_yaml["deployments"] if d["name"] == "rucl-gpu")
    env = {"RUBRICFLOW_IMAGE": "registry.example.com/rubricflow:0.1.0", "MLFLOW_TRACKING_URI": "http://head:5000"}
    job_vars = {
        k: (ic.interpolate(v.replace("{{ $", "${").replace(" }}", "}"), env) if isinstance(v, str) else v)
        for k, v in deployment["work_pool"]["job_variables"].items()
    }
    rendered = ic.render_job_configuration(template,
                                           {"name": "run-1", "command": "prefect flow-run execute", **job_vars})
    assert apply_values(rendered, {}) == rendered  # nothing left to fill
    job = rendered["job_manifest"]
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "registry.example.com/rubricflow:0.1.0"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8 == c["resources"]["requests"]["nvidia.com/gpu"]
    assert {e["name"]: e["value"] for e in c["env"]} == {
        "MLFLOW_TRACKING_URI": "http://head:5000",
        "RUBRICFLOW_THREADS": "16",
    }
    assert c["envFrom"] == [{"secretRef": {"name": "rubricflow-judge", "optional": False}}]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "rubricflow-state"
    assert "serviceAccountName" not in pod  # unset optional variable: key dropped, as Prefect does
    assert job["metadata"] == {"generateName": "run-1-", "namespace": "rubricflow"}
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400


def test_template_names_the_manifests_objects(template, k8s_docs, compose):
    names = {(d["kind"], d["metadata"]["name"]) for _, d in k8s_docs}
    defaults = ic.template_defaults(template)
    assert ("PersistentVolumeClaim", defaults["state_claim_name"]) in names
    assert ("Secret", defaults["judge_secret_name"]) in names
    assert ("Namespace", defaults["namespace"]) in names
    # Flow-run pods (same namespace) and the compose worker reach the judge at the same URL: http://judge:8000/v1.
    service = next(d for _, d in k8s_docs if d["kind"] == "Service")
    assert (service["metadata"]["name"], service["spec"]["ports"][0]["port"]) == ("judge", 8000)
    assert "--port=8000" in compose["services"]["judge"]["command"]


def _undeclared_placeholder(t):
    t["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["nodeSelector"] = "{{ node_selector }}"


TEMPLATE_BREAKAGES = {
    "undeclared placeholder": (
        _undeclared_placeholder,
        "job_configuration uses {{ node_selector }}, which variables.properties does not declare",
    ),
    "unused variable": (
        lambda t: t["variables"]["properties"].update({"priority": {"type": "string", "description": "x"}}),
        "variable 'priority' is declared but job_configuration never uses it",
    ),
    "no variables": (lambda t: t.pop("variables"), "needs a `variables` JSON schema with `properties`"),
    "no job configuration": (lambda t: t.pop("job_configuration"), "needs a non-empty `job_configuration` object"),
    "invalid default": (
        lambda t: t["variables"]["properties"]["gpu_count"].update({"default": "eight"}),
        "default of gpu_count is invalid",
    ),
    "unknown worker field": (
        lambda t: t["job_configuration"].update({"gpu": "{{ gpu_count }}"}),
        "job_configuration keys ['gpu'] are not Kubernetes worker fields",
    ),
    "required but undeclared": (
        lambda t: t["variables"]["required"].append("registry"),
        "variables.required names 'registry', which is not a property",
    ),
    "undocumented variable": (
        lambda t: t["variables"]["properties"]["shm_size"].pop("description"),
        "variables.properties.shm_size needs a type and a description",
    ),
    "GPU limit not templated": (
        lambda t: t["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]["resources"][
            "limits"
        ].update({"nvidia.com/gpu": 1}),
        "rendered limits['nvidia.com/gpu'] is 1, expected gpu_count default 8",
    ),
}


@pytest.mark.parametrize("case", sorted(TEMPLATE_BREAKAGES))
def test_template_checker_reports_breakage(template, case):
    mutate, expected = TEMPLATE_BREAKAGES[case]
    assert _has(ic.check_work_pool_template(_broken(template, mutate), "broken.json"), expected)


# ----------------------------------------------------------------------------------------------------------------
# Helm values and images


def test_helm_values_target_the_k8s_pool(prefect_yaml):
    worker = ic.load_yaml(HELM_VALUES)["worker"]
    assert worker["apiConfig"] == "selfHostedServer"
    assert re.fullmatch(r"http://[\w.-]+:4200/api", worker["selfHostedServerApiConfig"]["apiUrl"])
    k8s_pools = {d["work_pool"]["name"] for d in prefect_yaml["deployments"]
                 if ic.WORK_POOLS[d["work_pool"]["name"]] == "kubernetes"}
    assert k8s_pools == {worker["config"]["workPool"]} == {"rubricflow-k8s"}
    assert worker["config"]["type"] == "kubernetes"
    assert worker["image"]["prefectTag"] == f"{version('prefect')}-python3.11-kubernetes"


def _dockerfile_env(text: str) -> dict[str, str]:
    body = re.sub(r"\\\n", " ", text)
    env = {}
    for line in body.splitlines():
        if line.startswith("ENV "):
            env.update(dict(tok.split("=", 1) for tok in shlex.split(line[4:])))
    return env


def test_rubricflow_image_layout_matches_mounts(template):
    env = _dockerfile_env((INFRA / "docker" / "rubricflow.Dockerfile").read_text())
    root = env["RUBRICFLOW_ROOT"]
    assert root == "/app" and env["HF_HOME"] == f"{root}/.rubricflow/hf"
    for key, value in ic.TELEMETRY_OFF.items():
        assert env[key] == value
    container = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"] for m in container["volumeMounts"]} - {"/dev/shm"}
    assert mounts == {f"{root}/.rubricflow", f"{root}/data", f"{root}/artifacts"}
    ignore = (INFRA / "docker" / "rubricflow.Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".rubricflow", "infra/.env"} <= set(ignore)


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed


def test_hostfile_passes_and_deepspeed_parses_it():
    from deepspeed.launcher.runner import fetch_hostfile

    assert ic.check_hostfile(HOSTFILE.read_text()) == []
    assert dict(fetch_hostfile(str(HOSTFILE))) == {"gpu-node-0": 8, "gpu-node-1": 8}


@pytest.mark.parametrize(
    "line, expected",
    [
        ("gpu-node-2 slots=eight", "'gpu-node-2 slots=eight' is not `<hostname> slots=<N>`"),
        ("gpu-node-2  slots=4", "is not `<hostname> slots=<N>`"),
        ("slots=4", "is not `<hostname> slots=<N>`"),
        ("gpu-node-0 slots=8", "host gpu-node-0 repeats line"),
        ("gpu-node-2 slots=0", "gpu-node-2 has 0 slots"),
    ],
)
def test_hostfile_checker_reports_bad_line(line, expected):
    text = HOSTFILE.read_text() + line + "\n"
    problems = ic.check_hostfile(text, "broken-hostfile")
    assert _has(problems, expected), problems
    assert problems[0].startswith(f"broken-hostfile:{len(text.splitlines())}:")


def test_deepspeed_rejects_what_the_hostfile_checker_rejects(tmp_path):
    from deepspeed.launcher.runner import fetch_hostfile

    for line in ("gpu-node-2 slots=eight", "gpu-node-0 slots=8"):
        bad = tmp_path / "hostfile"
        bad.write_text(HOSTFILE.read_text() + line + "\n")
        with pytest.raises(ValueError):
            fetch_hostfile(str(bad))


def test_deepspeed_config_is_zero3_bf16_and_deepspeed_accepts_it():
    from deepspeed.runtime.config import DeepSpeedConfig

    cfg = json.loads(DS_CONFIG.read_text())
    assert ic.check_deepspeed_config(cfg) == []
    parsed = DeepSpeedConfig(cfg)  # DeepSpeed's own parser and pydantic models (world size 1 here)
    assert parsed.zero_optimization_stage == 3
    assert parsed.bfloat16_config.enabled and not parsed.float16_config.enabled
    assert parsed.gradient_clipping == 1.0
    # The engine micro-batches itself: one sample per DeepSpeed step, accumulation unmanaged.
    assert parsed.train_batch_size == 1


def test_deepspeed_config_is_what_the_engine_builds_for_the_gpu_settings():
    """The file is the engine's DeepSpeed config for ZeRO-3 + bf16 + NCCL and the default clipping norm:
    regenerate it from rubricflow.grpo.engine.deepspeed_config when the engine changes."""
    from rubricflow.grpo.config import EngineConfig, GRPOConfig
    from rubricflow.grpo.engine import deepspeed_config

    engine = EngineConfig(kind="deepspeed", zero_stage=3, bf16=True, dist_backend="nccl")
    assert json.loads(DS_CONFIG.read_text()) == deepspeed_config(engine, GRPOConfig().max_grad_norm)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage must be an integer in 0..3, got 4"),
        ({"zero_optimization": {"stage": "3"}}, "got '3'"),
        ({"fp16": {"enabled": True}}, "bf16 and fp16 are both enabled"),
        ({"gradient_clipping": 0}, "gradient_clipping must be a positive number, got 0"),
        ({"train_micro_batch_size_per_gpu": 0}, "train_micro_batch_size_per_gpu must be a positive integer"),
    ],
)
def test_deepspeed_config_checker_reports_breakage(change, expected):
    cfg = {**json.loads(DS_CONFIG.read_text()), **change}
    assert _has(ic.check_deepspeed_config(cfg, "broken.json"), expected)


@pytest.mark.parametrize("change", [{"zero_optimization": {"stage": 4}}, {"fp16": {"enabled": True}}])
def test_deepspeed_itself_rejects_the_same_breakage(change):
    from deepspeed.runtime.config import DeepSpeedConfig

    with pytest.raises(Exception, match="stage|bfloat16 and fp16"):
        DeepSpeedConfig({**json.loads(DS_CONFIG.read_text()), **change})


def _launch(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(["bash", str(LAUNCH), *args], capture_output=True, text=True, env={**base, **env}, timeout=30)


def test_launch_script_builds_a_command_deepspeed_accepts():
    from deepspeed.launcher.runner import parse_args

    cli_args = ["--profile", "gpu", "--set", "judge.openai.base_url=http://head:8000/v1", "sft"]
    result = _launch(
        cli_args,
        {"DRY_RUN": "1", "MASTER_ADDR": "gpu-node-0", "PREFECT_API_URL": "http://head:4200/api", "JUDGE_API_KEY": "k"},
    )
    assert result.returncode == 0, result.stderr
    command, forwarded = result.stdout.splitlines()
    argv = shlex.split(command)
    assert argv[0] == "deepspeed"
    args = parse_args(argv[1:])
    assert Path(args.hostfile) == HOSTFILE
    assert (args.master_addr, args.master_port, args.launcher) == ("gpu-node-0", 29500, "pdsh")
    assert args.no_python and args.no_local_rank
    assert (args.user_script, args.user_args) == ("rubricflow", cli_args)
    assert forwarded == "forwarded: PREFECT_API_URL JUDGE_API_KEY"


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["sft"], {}, "set MASTER_ADDR"),
        ([], {"MASTER_ADDR": "h"}, "usage: MASTER_ADDR=<first host>"),
        (["sft"], {"MASTER_ADDR": "h", "HOSTFILE": "/nonexistent/hostfile"},
         "hostfile not found: /nonexistent/hostfile"),
    ],
)
def test_launch_script_refuses_bad_invocations(args, env, expected):
    result = _launch(args, {"DRY_RUN": "1", **env})
    assert result.returncode != 0
    assert expected in result.stderr


# ----------------------------------------------------------------------------------------------------------------
# prefect.yaml


def test_prefect_yaml_passes_checks(prefect_yaml, template):
    assert ic.check_prefect_yaml(prefect_yaml, k8s_template=template) == []
    deployments = {d["name"]: d for d in prefect_yaml["deployments"]}
    assert {d["entrypoint"].split(":")[1] for d in deployments.values()} == {"rucl", "deltarubric", "roro", "smol",
                                                                            "study", "compare"}
    local = {n for n, d in deployments.items() if d["work_pool"]["name"] == "rubricflow-local"}
    assert local == {"rucl-local", "deltarubric-local", "roro-local", "smol-local", "study-local", "compare-local"}
    assert deployments["smol-local"]["parameters"] == {"profile": "smol"}
    assert all(deployments[n]["parameters"] == {"profile": "tiny"} for n in ("rucl-local", "deltarubric-local",
                                                                             "roro-local"))
    assert deployments["rucl-gpu"]["work_pool"]["name"] == "rubricflow-k8s"
    assert deployments["rucl-gpu"]["parameters"] == {"profile": "gpu"}


def test_prefect_yaml_schedule_is_an_inactive_nightly_cron(prefect_yaml):
    from cronsim import CronSim

    schedules = [s for d in prefect_yaml["deployments"] for s in d.get("schedules") or []]
    assert schedules == [{"cron": "0 3 * * *", "timezone": "UTC", "active": False}]
    start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    runs = CronSim(schedules[0]["cron"], start)
    assert [next(runs), next(runs)] == [
        dt.datetime(2026, 1, 2, 3, 0, tzinfo=dt.timezone.utc),
        dt.datetime(2026, 1, 3, 3, 0, tzinfo=dt.timezone.utc),
    ]


def test_pull_step_changes_into_the_project_root_at_run_time(prefect_yaml, monkeypatch):
    """Prefect resolves `{{ $VAR }}` in pull steps from the environment of the process running the flow."""
    from prefect.utilities.templating import apply_values

    monkeypatch.setenv("RUBRICFLOW_ROOT", "/srv/rubricflow")
    (step,) = prefect_yaml["pull"]
    resolved = apply_values(step, os.environ)
    assert resolved == {"prefect.deployments.steps.set_working_directory": {"directory": "/srv/rubricflow"}}


def _deployment(name: str):
    def pick(doc):
        return next(d for d in doc["deployments"] if d["name"] == name)

    return pick


PREFECT_BREAKAGES = {
    "bad cron": (
        lambda doc: _deployment("rucl-gpu")(doc)["schedules"][0].update({"cron": "0 3 * *"}),
        "invalid cron/timezone",
    ),
    "bad timezone": (
        lambda doc: _deployment("rucl-gpu")(doc)["schedules"][0].update({"timezone": "Mars/Base"}),
        "invalid cron/timezone",
    ),
    "active schedule": (
        lambda doc: _deployment("rucl-gpu")(doc)["schedules"][0].update({"active": True}),
        "must be inactive",
    ),
    "wrong function": (
        lambda doc: _deployment("roro-local")(doc).update({"entrypoint": "flows/pipelines.py:train"}),
        "flow function 'train' is not one of ['compare', 'deltarubric', 'roro', 'rucl', 'smol', 'study']",
    ),
    "pipeline flow outside flows/pipelines.py": (
        lambda doc: _deployment("roro-local")(doc).update({"entrypoint": "flows/roro.py:roro"}),
        "flow 'roro' lives in flows/pipelines.py, not flows/roro.py",
    ),
    "registered pipeline under another profile": (
        lambda doc: _deployment("smol-local")(doc).update({"parameters": {"profile": "tiny"}}),
        "registered pipeline 'smol' needs a deployment `smol-local`",
    ),
    "not a flows/ entrypoint": (
        lambda doc: _deployment("roro-local")(doc).update({"entrypoint": "roro.py:roro"}),
        "entrypoint 'roro.py:roro' is not flows/<module>.py:<function>",
    ),
    "missing flow": (lambda doc: doc["deployments"].pop(2), "no deployment for flows ['roro']"),
    "unknown pool": (
        lambda doc: _deployment("rucl-local")(doc).update({"work_pool": {"name": "default"}}),
        "work_pool.name 'default' is not one of",
    ),
    "unknown profile": (
        lambda doc: _deployment("rucl-local")(doc).update({"parameters": {"profile": "huge"}}),
        "parameters.profile 'huge' is not one of ['gpu', 'smol', 'tiny']",
    ),
    "no pull step": (
        lambda doc: doc.update({"pull": []}),
        "pull steps need prefect.deployments.steps.set_working_directory",
    ),
    "unknown job variable": (
        lambda doc: _deployment("rucl-gpu")(doc)["work_pool"]["job_variables"].update({"gpus": 8}),
        "job_variables ['gpus'] are not variables of the pool template",
    ),
    "job variable of the wrong type": (
        lambda doc: _deployment("rucl-gpu")(doc)["work_pool"]["job_variables"].update({"gpu_count": "8"}),
        "job_variables invalid for the pool template: '8' is not of type 'integer'",
    ),
    "required job variable missing": (
        lambda doc: _deployment("rucl-gpu")(doc)["work_pool"]["job_variables"].pop("image"),
        "'image' is a required property",
    ),
    "duplicate name": (
        lambda doc: doc["deployments"].append(copy.deepcopy(doc["deployments"][0])),
        "duplicate deployment name",
    ),
    "rejected by Prefect": (
        lambda doc: doc.update({"deployments": {"rucl": {}}}),
        "rejected by Prefect's prefect.yaml model",
    ),
}


@pytest.mark.parametrize("case", sorted(PREFECT_BREAKAGES))
def test_prefect_yaml_checker_reports_breakage(prefect_yaml, template, case):
    mutate, expected = PREFECT_BREAKAGES[case]
    problems = ic.check_prefect_yaml(_broken(prefect_yaml, mutate), "broken-prefect.yaml", k8s_template=template)
    assert _has(problems, expected), problems


# ----------------------------------------------------------------------------------------------------------------
# README


def test_readme_refers_only_to_files_that_exist():
    text = (INFRA / "README.md").read_text()
    paths = set(re.findall(r"\b((?:infra|flows|tests)/[\w./-]*\w|prefect\.yaml|params\.yaml)\b", text))
    assert {"infra/docker-compose.yml", "infra/k8s/work-pool-template.json", "infra/deepspeed/launch.sh"} <= paths
    # params.yaml and flows/ are written by others, infra/.env by the user; everything else must exist.
    others = {"params.yaml", "infra/.env"}
    missing = sorted(p for p in paths if not p.startswith("flows/") and p not in others and not (ROOT / p).exists())
    assert missing == []


def test_readme_judge_settings_are_valid_judge_config(compose, k8s_docs):
    """The params.yaml judge block the guide gives validates against the judge's config section and names the
    model both judge deployments serve by default."""
    judge_config = pytest.importorskip("rubricflow.judge.config", reason="judge config section not in this tree")
    text = (INFRA / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("judge:"))
    cfg = judge_config.JudgeConfig.model_validate(yaml.safe_load(block)["judge"])
    assert (cfg.backend, cfg.openai.base_url, cfg.openai.api_key_env) == ("openai", "http://judge:8000/v1",
                                                                          "JUDGE_API_KEY")
    assert ic.interpolate(compose["services"]["judge"]["command"][0]) == cfg.openai.model
    assert _judge_container(_judge(k8s_docs))["args"][0] == cfg.openai.model
