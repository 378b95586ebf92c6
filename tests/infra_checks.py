"""Checkers for the deployable infrastructure files: infra/docker-compose.yml, infra/k8s/*, infra/helm/*,
infra/deepspeed/*, prefect.yaml.

Docker, Kubernetes and GPUs are not available where the tests run, so these parse the files and check what the
real tools would reject or what would break at run time (an undefined service in depends_on, an undeclared
volume or template placeholder, a selector that matches no pod, a literal password, an invalid cron string).
Where the real tool's own validator is importable it is used: Prefect's prefect.yaml model, cron/timezone
validation, templating and job-variable validation; DeepSpeed's hostfile parser and config classes (in the tests).

Every ``check_*`` returns a list of problems, each naming the file (``label``), the place and what was expected;
an empty list means the file passed. The tests run them on the real files and on deliberately broken copies.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"

# ----------------------------------------------------------------------------------------------------------------
# Shared helpers


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


# `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?error}`, `${NAME?error}`, `${NAME:+alt}`, `${NAME+alt}`
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")


class MissingVariable(ValueError):
    """A `${VAR:?...}` / `${VAR?...}` reference whose variable is not set."""


def interpolate(text: str, env: dict[str, str] | None = None) -> str:
    """Compose-style variable interpolation (``$$`` is a literal ``$``); unset required variables raise."""
    env = env or {}

    def sub(m: re.Match) -> str:
        name, op, arg = m.group("name"), m.group("op"), m.group("arg") or ""
        value = env.get(name)
        if op in (":-", "-"):
            return value if (value if op == ":-" else value is not None) else arg
        if op in (":?", "?"):
            if (not value) if op == ":?" else value is None:
                raise MissingVariable(f"variable {name} is required: {arg}")
            return value
        if op in (":+", "+"):
            return arg if (value if op == ":+" else value is not None) else ""
        return value or ""

    parts = text.split("$$")
    return "$".join(_VAR.sub(sub, p) for p in parts)


def is_secret_placeholder(value: Any) -> bool:
    """True for a value that is exactly one `${VAR}` reference with no non-empty default (`${VAR:-}` is fine,
    `${VAR:-hunter2}` is a literal secret in disguise)."""
    if not isinstance(value, str):
        return False
    m = _VAR.fullmatch(value.strip())
    if not m:
        return False
    return m.group("op") in (None, ":?", "?") or not (m.group("arg") or "")


SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY|ACCESS_KEY", re.IGNORECASE)
# scheme://user:password@host
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<password>[^\s@]+)@", re.IGNORECASE)


def _mask_placeholders(text: str) -> str:
    """Replace each secret-safe `${VAR}` reference with NUL and each reference with a default by that default,
    so a literal hiding behind `${VAR:-literal}` shows as the literal."""

    def sub(m: re.Match) -> str:
        if is_secret_placeholder(m.group(0)):
            return "\0"
        return (m.group("arg") or "") if m.group("op") in (":-", "-") else "\0"

    return _VAR.sub(sub, text.replace("$$", ""))


def _secret_problems(where: str, key: str | None, value: Any) -> list[str]:
    if not isinstance(value, (str, int, float)):
        return []
    value = str(value)
    problems = []
    if key is not None and SECRET_NAME.search(key) and value and not is_secret_placeholder(value):
        problems.append(f"{where}: {key} holds a literal value; expected only a ${{VAR}} placeholder")
    for m in _URL_CREDENTIALS.finditer(_mask_placeholders(value)):
        if m.group("password") != "\0":
            problems.append(f"{where}: URL password {m.group('password')!r} is literal; "
                            f"expected a ${{VAR}} placeholder")
    return problems


def _walk_strings(node: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _walk_strings(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_strings(v, f"{path}[{i}]")


# ----------------------------------------------------------------------------------------------------------------
# docker compose

REQUIRED_SERVICES = {"postgres", "prefect-server", "mlflow", "minio", "judge", "worker"}
TELEMETRY_OFF = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
DEPENDS_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
_PORT = re.compile(
    r"^(?:(?P<ip>\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):)?(?:(?P<published>\d+(?:-\d+)?)?:)?"
    r"(?P<target>\d+(?:-\d+)?)(?:/(?P<proto>tcp|udp|sctp))?$"
)


def service_env(service: dict) -> dict[str, Any]:
    """A service's environment as a dict (compose accepts a mapping or a list of NAME=value)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env)


def _depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def _port_range_ok(text: str | None) -> bool:
    if text is None:
        return True
    bounds = [int(x) for x in text.split("-")]
    return all(1 <= b <= 65535 for b in bounds) and bounds == sorted(bounds)


def check_port(entry: Any, env: dict[str, str] | None = None) -> str | None:
    """None if ``entry`` is a valid compose port (int, short string syntax after interpolation, or long
    syntax); otherwise what is wrong."""
    if isinstance(entry, bool):
        return f"{entry!r} is not a port"
    if isinstance(entry, int):
        return None if 1 <= entry <= 65535 else f"{entry} is outside 1..65535"
    if isinstance(entry, dict):
        target = entry.get("target")
        if not isinstance(target, int) or not 1 <= target <= 65535:
            return f"long syntax needs an integer target in 1..65535, got {target!r}"
        published = entry.get("published")
        if published is not None and check_port(str(published), env) is not None:
            return f"published {published!r} is not a port"
        return None
    if not isinstance(entry, str):
        return f"{entry!r} is neither an int nor a string"
    try:
        text = interpolate(entry, env)
    except MissingVariable as e:
        return str(e)
    m = _PORT.match(text)
    if not m:
        return f"{entry!r} (= {text!r}) is not [IP:][HOST:]CONTAINER[/PROTO]"
    if not (_port_range_ok(m.group("published")) and _port_range_ok(m.group("target"))):
        return f"{entry!r} has a port outside 1..65535"
    if m.group("ip"):
        try:
            ipaddress.ip_address(m.group("ip").strip("[]"))
        except ValueError:
            return f"{entry!r}: {m.group('ip')!r} is not an IP address"
    return None


def _named_volumes(service: dict) -> list[str]:
    names = []
    for v in service.get("volumes") or []:
        if isinstance(v, str):
            source = v.split(":", 1)[0] if ":" in v else None
            if source and not source.startswith((".", "/", "~", "$")):
                names.append(source)
        elif isinstance(v, dict) and v.get("type", "volume") == "volume" and v.get("source"):
            names.append(v["source"])
    return names


def _healthcheck_problem(hc: Any) -> str | None:
    if not isinstance(hc, dict):
        return "no healthcheck"
    if hc.get("disable"):
        return "healthcheck disabled"
    test = hc.get("test")
    if isinstance(test, str) and test.strip():
        return None
    if isinstance(test, list) and len(test) >= 2 and test[0] in ("CMD", "CMD-SHELL"):
        return None
    return f"healthcheck test must be a string or [CMD|CMD-SHELL, ...], got {test!r}"


def check_compose(doc: Any, label: str = "infra/docker-compose.yml") -> list[str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        return [f"{label}: expected a mapping with a `services` mapping"]
    services: dict[str, dict] = doc["services"]
    declared_volumes = set((doc.get("volumes") or {}).keys())
    problems = []

    missing = REQUIRED_SERVICES - services.keys()
    if missing:
        problems.append(f"{label}: missing services {sorted(missing)}; expected at least {sorted(REQUIRED_SERVICES)}")

    # One-shot jobs are those others wait for to *complete*; every other service must report health.
    one_shot = {
        dep for svc in services.values() for dep, cond in _depends_on(svc).items()
        if cond == "service_completed_successfully"
    }
    used_volumes: set[str] = set()
    for name, svc in services.items():
        where = f"{label}: services.{name}"
        if not isinstance(svc, dict):
            problems.append(f"{where}: expected a mapping")
            continue
        if not svc.get("image") and not svc.get("build"):
            problems.append(f"{where}: needs `image` or `build`")
        for dep, cond in _depends_on(svc).items():
            if dep not in services:
                problems.append(f"{where}.depends_on: {dep!r} is not a defined service")
                continue
            if cond not in DEPENDS_CONDITIONS:
                problems.append(f"{where}.depends_on.{dep}: unknown condition {cond!r}")
            if cond == "service_healthy" and _healthcheck_problem(services[dep].get("healthcheck")):
                problems.append(f"{where}.depends_on.{dep}: waits for service_healthy but {dep} has no healthcheck")
        if name not in one_shot:
            hc = _healthcheck_problem(svc.get("healthcheck"))
            if hc:
                problems.append(f"{where}: {hc} (every long-running service needs one)")
        vols = _named_volumes(svc)
        used_volumes.update(vols)
        for vol in vols:
            if vol not in declared_volumes:
                problems.append(f"{where}.volumes: named volume {vol!r} is not declared under top-level `volumes`")
        for i, port in enumerate(svc.get("ports") or []):
            err = check_port(port)
            if err:
                problems.append(f"{where}.ports[{i}]: {err}")
        env = service_env(svc)
        for key, expected in TELEMETRY_OFF.items():
            if str(env.get(key)) != expected:
                problems.append(f"{where}.environment: {key} must be {expected!r} (telemetry off), "
                                f"got {env.get(key)!r}")
        for key, value in env.items():
            problems += _secret_problems(f"{where}.environment", key, value)
        for path, text in _walk_strings(svc.get("command"), f"{where}.command"):
            problems += _secret_problems(path, None, text)
            m = re.search(r"--(?:api-key|password|token)[= ](?P<v>\S+)", text)
            if m and not is_secret_placeholder(m.group("v")):
                problems.append(f"{path}: literal secret on the command line; expected a ${{VAR}} placeholder")
    for vol in sorted(declared_volumes - used_volumes):
        problems.append(f"{label}: volume {vol!r} is declared but no service uses it")
    if "judge" in services:
        problems += _check_compose_judge(services["judge"], f"{label}: services.judge")
    return problems


def _flag_value(args: list[str], flag: str) -> str | None:
    """Value of ``--flag=value`` or ``--flag value`` in an argument list; the last one wins, as in argparse."""
    value = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            value = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            value = args[i + 1]
    return value


def _check_vllm_args(args: list[str], where: str, gpus: int | None) -> list[str]:
    problems = []
    model = next((a for a in args if not a.startswith("-")), None)
    if not model or not re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        problems.append(f"{where}: first positional argument must be a model id like Org/Name, got {model!r}")
    if not (_flag_value(args, "--max-model-len") or "").isdigit():
        problems.append(f"{where}: --max-model-len must be set to an integer")
    util = _flag_value(args, "--gpu-memory-utilization")
    try:
        if not 0 < float(util) <= 1:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"{where}: --gpu-memory-utilization must be in (0, 1], got {util!r}")
    tp = _flag_value(args, "--tensor-parallel-size") or "1"
    if gpus is not None and tp.isdigit() and int(tp) != gpus:
        problems.append(f"{where}: --tensor-parallel-size {tp} does not match the {gpus} GPU(s) reserved")
    return problems


def _check_compose_judge(judge: dict, where: str) -> list[str]:
    problems = []
    devices = (((judge.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    nvidia = [d for d in devices if d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or [])]
    if not nvidia:
        problems.append(f"{where}: needs deploy.resources.reservations.devices with driver nvidia, capabilities [gpu]")
        gpus = None
    else:
        count = nvidia[0].get("count", len(nvidia[0].get("device_ids") or []))
        gpus = count if isinstance(count, int) else None
    entry = judge.get("entrypoint") or []
    command = judge.get("command") or []
    if isinstance(entry, str) or isinstance(command, str):
        return problems + [f"{where}: entrypoint and command must be lists (exec form)"]
    args = [interpolate(a) for a in [*entry, *command]]
    if args[:2] != ["vllm", "serve"]:
        problems.append(f"{where}: expected `vllm serve` (entrypoint + command), got {args[:2]}")
    return problems + _check_vllm_args(args[2:], where, gpus)


# ----------------------------------------------------------------------------------------------------------------
# Kubernetes manifests

K8S_API_VERSIONS = {
    "Namespace": "v1",
    "Secret": "v1",
    "ConfigMap": "v1",
    "PersistentVolumeClaim": "v1",
    "Service": "v1",
    "Deployment": "apps/v1",
}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def _image_problem(image: Any) -> str | None:
    if not isinstance(image, str) or not image.strip():
        return "image must be a non-empty string"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last and "@sha256:" not in image:
        return f"image {image!r} has no tag (pin a version)"
    if last.endswith(":latest"):
        return f"image {image!r} uses :latest (pin a version)"
    return None


def _resource_problems(resources: dict, where: str) -> list[str]:
    problems = []
    for section in ("requests", "limits"):
        for res, qty in (resources.get(section) or {}).items():
            if not _QUANTITY.match(str(qty)):
                problems.append(f"{where}.resources.{section}.{res}: {qty!r} is not a Kubernetes quantity")
    req_gpu = (resources.get("requests") or {}).get("nvidia.com/gpu")
    lim_gpu = (resources.get("limits") or {}).get("nvidia.com/gpu")
    if req_gpu is not None and str(req_gpu) != str(lim_gpu):
        problems.append(f"{where}.resources: nvidia.com/gpu request {req_gpu!r} must equal its limit {lim_gpu!r}")
    return problems


def _probe_problem(probe: Any, ports: dict[str, int]) -> str | None:
    if not isinstance(probe, dict):
        return "missing"
    http = probe.get("httpGet")
    if http is not None:
        port = http.get("port")
        if isinstance(port, str) and port not in ports:
            return f"httpGet port {port!r} names no containerPort (have {sorted(ports)})"
        if isinstance(port, int) and port not in ports.values():
            return f"httpGet port {port} is not a containerPort"
        return None
    if any(k in probe for k in ("tcpSocket", "exec", "grpc")):
        return None
    return "needs httpGet, tcpSocket, exec or grpc"


def check_pod_spec(spec: Any, where: str, volumes_claims: set[str], secrets: dict[str, set[str]]) -> list[str]:
    """A pod spec: containers with pinned images, mounts of declared volumes, existing claims and secret keys."""
    if not isinstance(spec, dict) or not spec.get("containers"):
        return [f"{where}: pod spec needs a non-empty `containers` list"]
    problems = []
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    for v in volumes.values():
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim is not None and claim not in volumes_claims:
            problems.append(f"{where}.volumes.{v.get('name')}: claim {claim!r} is not a PersistentVolumeClaim here")
    for c in spec["containers"]:
        cw = f"{where}.containers.{c.get('name')}"
        if not c.get("name"):
            problems.append(f"{cw}: container needs a name")
        err = _image_problem(c.get("image"))
        if err:
            problems.append(f"{cw}: {err}")
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                problems.append(f"{cw}.volumeMounts: {m.get('name')!r} is not a pod volume")
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                if ref.get("name") not in secrets:
                    problems.append(f"{cw}.env.{e.get('name')}: secret {ref.get('name')!r} is not defined here")
                elif ref.get("key") not in secrets[ref.get("name")]:
                    problems.append(f"{cw}.env.{e.get('name')}: secret {ref.get('name')!r} "
                                    f"has no key {ref.get('key')!r}")
        problems += _resource_problems(c.get("resources") or {}, cw)
    return problems


def _container_ports(spec: dict) -> dict[str, int]:
    return {
        p.get("name", str(p.get("containerPort"))): p.get("containerPort")
        for c in spec.get("containers") or [] for p in c.get("ports") or []
    }


def check_k8s(docs: list[tuple[str, Any]]) -> list[str]:
    """``docs``: (label, document) for every document of every manifest file, checked together (a Service's
    selector, a mounted claim or a referenced secret may live in another file)."""
    problems = []
    objs = []
    for label, doc in docs:
        if not isinstance(doc, dict):
            problems.append(f"{label}: document is not a mapping")
            continue
        kind, api, name = doc.get("kind"), doc.get("apiVersion"), (doc.get("metadata") or {}).get("name")
        where = f"{label}: {kind}/{name}"
        if not (kind and api and name):
            problems.append(f"{where}: needs apiVersion, kind and metadata.name")
            continue
        if kind not in K8S_API_VERSIONS:
            problems.append(f"{where}: unexpected kind {kind!r}; expected one of {sorted(K8S_API_VERSIONS)}")
            continue
        if api != K8S_API_VERSIONS[kind]:
            problems.append(f"{where}: apiVersion {api!r}; {kind} is {K8S_API_VERSIONS[kind]!r}")
        if not _DNS1123.match(name) or len(name) > 63:
            problems.append(f"{where}: metadata.name is not a DNS-1123 label")
        objs.append((where, doc))

    claims = {d["metadata"]["name"] for _, d in objs if d["kind"] == "PersistentVolumeClaim"}
    secrets = {
        d["metadata"]["name"]: set((d.get("stringData") or {}).keys()) | set((d.get("data") or {}).keys())
        for _, d in objs if d["kind"] == "Secret"
    }
    pod_templates = []  # (where, pod labels, pod spec)
    for where, d in objs:
        if d["kind"] == "Secret":
            if d.get("data"):
                problems.append(f"{where}: `data` holds base64 values; a template must use stringData placeholders")
            for key, value in (d.get("stringData") or {}).items():
                if not is_secret_placeholder(value):
                    problems.append(f"{where}: stringData.{key} is literal; expected a ${{VAR}} placeholder")
        elif d["kind"] == "PersistentVolumeClaim":
            size = (((d.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
            if not size or not _QUANTITY.match(str(size)):
                problems.append(f"{where}: spec.resources.requests.storage must be a quantity, got {size!r}")
            if not (d.get("spec") or {}).get("accessModes"):
                problems.append(f"{where}: spec.accessModes is required")
        elif d["kind"] == "Deployment":
            spec = d.get("spec") or {}
            template = spec.get("template") or {}
            labels = (template.get("metadata") or {}).get("labels") or {}
            selector = (spec.get("selector") or {}).get("matchLabels") or {}
            if not selector:
                problems.append(f"{where}: spec.selector.matchLabels is required")
            elif any(labels.get(k) != v for k, v in selector.items()):
                problems.append(f"{where}: selector {selector} does not match the pod template labels {labels}")
            pod = template.get("spec")
            problems += check_pod_spec(pod, where, claims, secrets)
            if isinstance(pod, dict):
                ports = _container_ports(pod)
                for c in pod.get("containers") or []:
                    err = _probe_problem(c.get("readinessProbe"), ports)
                    if err:
                        problems.append(f"{where}.containers.{c.get('name')}: readinessProbe {err}")
                pod_templates.append((where, labels, pod))
    for where, d in objs:
        if d["kind"] != "Service":
            continue
        selector = (d.get("spec") or {}).get("selector") or {}
        targets = [p for _, labels, p in pod_templates
                   if selector and all(labels.get(k) == v for k, v in selector.items())]
        if not targets:
            problems.append(f"{where}: selector {selector} matches no Deployment's pods")
            continue
        ports = _container_ports(targets[0])
        for p in (d.get("spec") or {}).get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            if ((isinstance(target, str) and target not in ports)
                    or (isinstance(target, int) and target not in ports.values())):
                problems.append(f"{where}: targetPort {target!r} is not a port of the selected pods ({ports})")
    return problems


def check_judge_deployment(doc: dict, where: str) -> list[str]:
    """The vLLM judge: GPUs in limits matching tensor parallelism, probes on /health, a real model id."""
    problems = []
    pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    if not containers:
        return [f"{where}: no containers"]
    c = containers[0]
    gpus = ((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
    if not isinstance(gpus, int) or gpus < 1:
        problems.append(f"{where}: resources.limits['nvidia.com/gpu'] must be an integer >= 1, got {gpus!r}")
        gpus = None
    ready = c.get("readinessProbe") or {}
    if (ready.get("httpGet") or {}).get("path") != "/health":
        problems.append(f"{where}: readinessProbe must be httpGet on /health")
    if not c.get("livenessProbe"):
        problems.append(f"{where}: livenessProbe missing")
    if (c.get("command") or [])[:2] != ["vllm", "serve"]:
        problems.append(f"{where}: command must be [vllm, serve], got {c.get('command')}")
    problems += _check_vllm_args([str(a) for a in c.get("args") or []], where, gpus)
    return problems


# ----------------------------------------------------------------------------------------------------------------
# Prefect Kubernetes work pool base job template

# Fields of the Kubernetes worker's job configuration (prefect-kubernetes KubernetesWorkerJobConfiguration).
K8S_JOB_CONFIGURATION_KEYS = {
    "command", "env", "labels", "name", "namespace", "job_manifest",
    "cluster_config", "job_watch_timeout_seconds", "pod_watch_timeout_seconds", "stream_output",
}


def template_defaults(template: dict) -> dict[str, Any]:
    props = (template.get("variables") or {}).get("properties") or {}
    return {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}


def render_job_configuration(template: dict, values: dict[str, Any]) -> dict:
    """The job configuration as the worker builds it: variable defaults overlaid by ``values``, placeholders
    replaced with Prefect's own templating (unset optional placeholders drop their key)."""
    from prefect.utilities.templating import apply_values

    return apply_values(copy.deepcopy(template["job_configuration"]), {**template_defaults(template), **values})


def check_work_pool_template(template: Any, label: str = "infra/k8s/work-pool-template.json") -> list[str]:
    from prefect.utilities.schema_tools.validation import is_valid_schema, validate
    from prefect.utilities.templating import PlaceholderType, find_placeholders

    if not isinstance(template, dict):
        return [f"{label}: expected a JSON object"]
    problems = []
    job_config, variables = template.get("job_configuration"), template.get("variables")
    if not isinstance(job_config, dict) or not job_config:
        problems.append(f"{label}: needs a non-empty `job_configuration` object")
    if not isinstance(variables, dict) or not isinstance(variables.get("properties"), dict):
        problems.append(f"{label}: needs a `variables` JSON schema with `properties`")
    if problems:
        return problems
    props = variables["properties"]
    if variables.get("type") != "object":
        problems.append(f"{label}: variables.type must be 'object'")
    try:
        is_valid_schema(variables)
    except ValueError as e:
        problems.append(f"{label}: variables is not a valid JSON schema: {e}")
    for name, schema in props.items():
        if not isinstance(schema, dict) or "type" not in schema or not schema.get("description"):
            problems.append(f"{label}: variables.properties.{name} needs a type and a description")
    for name in variables.get("required") or []:
        if name not in props:
            problems.append(f"{label}: variables.required names {name!r}, which is not a property")

    unknown_keys = set(job_config) - K8S_JOB_CONFIGURATION_KEYS
    if unknown_keys:
        problems.append(f"{label}: job_configuration keys {sorted(unknown_keys)} are not Kubernetes worker fields")
    used = {p.name for p in find_placeholders(job_config) if p.type is PlaceholderType.STANDARD}
    for name in sorted(used - props.keys()):
        problems.append(f"{label}: job_configuration uses {{{{ {name} }}}}, "
                        "which variables.properties does not declare")
    for name in sorted(props.keys() - used):
        problems.append(f"{label}: variable {name!r} is declared but job_configuration never uses it "
                        "(it would have no effect)")

    defaults = template_defaults(template)
    for err in validate(defaults, variables, ignore_required=True):
        problems.append(f"{label}: default of {'.'.join(map(str, err.path)) or '<root>'} is invalid: {err.message}")
    if problems:
        return problems

    # Render as the worker would, with stand-ins for the values the worker / a deployment supply.
    standins = {"name": "check-run", "command": "prefect flow-run execute", "labels": {}, "env": {}}
    for name in variables.get("required") or []:
        if name not in defaults:
            standins[name] = "registry.example.com/rubricflow:check" if name == "image" else f"check-{name}"
    rendered = render_job_configuration(template, standins)
    problems += _check_rendered_job(rendered, defaults, label)
    return problems


def _check_rendered_job(rendered: dict, defaults: dict, label: str) -> list[str]:
    problems = []
    job = rendered.get("job_manifest")
    if not isinstance(job, dict) or job.get("kind") != "Job" or job.get("apiVersion") != "batch/v1":
        return [f"{label}: job_manifest must render to a batch/v1 Job"]
    leftovers = [path for path, s in _walk_strings(job, "job_manifest") if "{{" in s]
    if leftovers:
        problems.append(f"{label}: placeholders left after rendering at {leftovers}")
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec")
    claims = {
        (v.get("persistentVolumeClaim") or {}).get("claimName")
        for v in (pod or {}).get("volumes") or [] if v.get("persistentVolumeClaim")
    }
    problems += check_pod_spec(pod, f"{label}: rendered job_manifest", claims, {})
    containers = (pod or {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    if "gpu_count" in defaults and limits.get("nvidia.com/gpu") != defaults["gpu_count"]:
        problems.append(
            f"{label}: rendered limits['nvidia.com/gpu'] is {limits.get('nvidia.com/gpu')!r}, "
            f"expected gpu_count default {defaults['gpu_count']!r}"
        )
    return problems


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed

HOSTFILE_LINE = re.compile(r"^\S+ slots=\d+$")


def check_hostfile(text: str, label: str = "infra/deepspeed/hostfile") -> list[str]:
    problems, hosts = [], {}
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not HOSTFILE_LINE.match(line):
            problems.append(f"{label}:{n}: {line!r} is not `<hostname> slots=<N>`")
            continue
        host, slots = line.split(" slots=")
        if int(slots) < 1:
            problems.append(f"{label}:{n}: {host} has {slots} slots; expected at least 1")
        if host in hosts:
            problems.append(f"{label}:{n}: host {host} repeats line {hosts[host]}")
        hosts.setdefault(host, n)
    if not hosts and not problems:
        problems.append(f"{label}: no hosts")
    return problems


def check_deepspeed_config(cfg: Any, label: str = "infra/deepspeed/zero3_bf16.json") -> list[str]:
    if not isinstance(cfg, dict):
        return [f"{label}: expected a JSON object"]
    problems = []
    stage = (cfg.get("zero_optimization") or {}).get("stage")
    if not isinstance(stage, int) or isinstance(stage, bool) or not 0 <= stage <= 3:
        problems.append(f"{label}: zero_optimization.stage must be an integer in 0..3, got {stage!r}")
    bf16 = bool((cfg.get("bf16") or cfg.get("bfloat16") or {}).get("enabled"))
    fp16 = bool((cfg.get("fp16") or {}).get("enabled"))
    if bf16 and fp16:
        problems.append(f"{label}: bf16 and fp16 are both enabled; enable at most one")
    clip = cfg.get("gradient_clipping")
    if not isinstance(clip, (int, float)) or isinstance(clip, bool) or clip <= 0:
        problems.append(f"{label}: gradient_clipping must be a positive number, got {clip!r}")
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        value = cfg.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            problems.append(f"{label}: {key} must be a positive integer, got {value!r}")
    return problems


# ----------------------------------------------------------------------------------------------------------------
# prefect.yaml

OWN_MODULE_FLOWS = {"study", "compare"}  # flows/<x>.py:<x>; the pipelines' flows are flows/pipelines.py:<pipeline>
PROFILE_FREE = {"compare"}  # flows whose form has no profile


def registered_pipelines() -> dict[str, str]:
    """Each registered pipeline (rubricflow.registry) -> the profile its flow's form defaults to."""
    from rubricflow.config import DEFAULT_PROFILE
    from rubricflow.registry import pipelines

    return {name: p.profile or DEFAULT_PROFILE for name, p in pipelines().items()}


def flow_functions() -> set[str]:
    return set(registered_pipelines()) | OWN_MODULE_FLOWS
WORK_POOLS = {"rubricflow-local": "process", "rubricflow-k8s": "kubernetes"}
ENTRYPOINT = re.compile(r"^flows/(?P<module>[a-z_][a-z0-9_]*)\.py:(?P<func>[a-z_][a-z0-9_]*)$")


def _pull_steps(deployment: dict, doc: dict) -> list:
    return deployment["pull"] if "pull" in deployment else doc.get("pull") or []


def check_prefect_yaml(doc: Any, label: str = "prefect.yaml", k8s_template: dict | None = None) -> list[str]:
    """Deployments: valid for Prefect's own prefect.yaml model; entrypoints flows/pipelines.py:<pipeline> for every
    registered pipeline (each with a ``<pipeline>-local`` deployment under its own profile) and flows/<x>.py:<x> for
    ``study`` and ``compare``; known work pools; a profile params.yaml defines; valid (inactive) cron schedules; a
    set_working_directory pull step; Kubernetes job variables valid for the pool's base job template
    (``k8s_template``)."""
    from prefect.cli.deploy._models import PrefectYamlModel
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.utilities.schema_tools.validation import validate
    from pydantic import ValidationError

    from rubricflow.config import profile_names

    if not isinstance(doc, dict):
        return [f"{label}: expected a mapping"]
    try:
        PrefectYamlModel.model_validate(doc)
    except ValidationError as e:
        return [f"{label}: rejected by Prefect's prefect.yaml model: {e}"]
    problems = []
    deployments = doc.get("deployments") or []
    if not deployments:
        return [f"{label}: no deployments"]
    seen_names, funcs = set(), set()
    profiles = set(profile_names(ROOT / "params.yaml"))
    pipelines = registered_pipelines()
    functions = flow_functions()
    for i, d in enumerate(deployments):
        where = f"{label}: deployments[{i}] ({d.get('name')})"
        for key in ("name", "entrypoint"):
            if not d.get(key):
                problems.append(f"{where}: `{key}` is required")
        if d.get("name") in seen_names:
            problems.append(f"{where}: duplicate deployment name")
        seen_names.add(d.get("name"))
        m = ENTRYPOINT.match(d.get("entrypoint") or "")
        if not m:
            problems.append(f"{where}: entrypoint {d.get('entrypoint')!r} is not flows/<module>.py:<function>")
        else:
            funcs.add(m.group("func"))
            if m.group("func") not in functions:
                problems.append(f"{where}: flow function {m.group('func')!r} is not one of {sorted(functions)} "
                                "(the registered pipelines, study and compare)")
            module = "pipelines" if m.group("func") in pipelines else m.group("func")
            if m.group("module") != module:
                problems.append(f"{where}: flow {m.group('func')!r} lives in flows/{module}.py, "
                                f"not flows/{m.group('module')}.py")
        pool = (d.get("work_pool") or {}).get("name")
        if pool not in WORK_POOLS:
            problems.append(f"{where}: work_pool.name {pool!r} is not one of {sorted(WORK_POOLS)}")
        profile = (d.get("parameters") or {}).get("profile")
        if m and m.group("func") in PROFILE_FREE:
            if "profile" in (d.get("parameters") or {}):
                problems.append(f"{where}: flow {m.group('func')!r} takes no profile")
        elif profile not in profiles:
            problems.append(f"{where}: parameters.profile {profile!r} is not one of {sorted(profiles)}")
        tags = d.get("tags")
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) for t in tags):
            problems.append(f"{where}: tags must be a non-empty list of strings")
        for j, s in enumerate(d.get("schedules") or []):
            if "cron" not in s:
                problems.append(f"{where}.schedules[{j}]: expected a cron schedule")
                continue
            try:
                CronSchedule(cron=s["cron"], timezone=s.get("timezone"))
            except ValidationError as e:
                problems.append(f"{where}.schedules[{j}]: invalid cron/timezone: {e.errors()[0]['msg']}")
            if s.get("active") is not False:
                problems.append(f"{where}.schedules[{j}]: example schedules must be inactive (active: false)")
        steps = _pull_steps(d, doc)
        workdirs = [
            (s.get("prefect.deployments.steps.set_working_directory") or {}).get("directory")
            for s in steps if isinstance(s, dict) and "prefect.deployments.steps.set_working_directory" in s
        ]
        if not workdirs or not all(workdirs):
            problems.append(f"{where}: pull steps need prefect.deployments.steps.set_working_directory "
                            "with a directory")
        if pool == "rubricflow-k8s" and k8s_template is not None:
            variables = k8s_template["variables"]
            job_vars = (d.get("work_pool") or {}).get("job_variables") or {}
            unknown = set(job_vars) - set(variables["properties"])
            if unknown:
                problems.append(f"{where}: job_variables {sorted(unknown)} are not variables of the pool template")
            for err in validate({**template_defaults(k8s_template), **job_vars}, variables):
                problems.append(f"{where}: job_variables invalid for the pool template: {err.message}")
    missing = functions - funcs
    if missing:
        problems.append(f"{label}: no deployment for flows {sorted(missing)}")
    by_name = {d.get("name"): d for d in deployments}
    for name, profile in pipelines.items():
        d = by_name.get(f"{name}-local")
        want = {"entrypoint": f"flows/pipelines.py:{name}", "profile": profile, "pool": "rubricflow-local"}
        got = d and {"entrypoint": d.get("entrypoint"), "profile": (d.get("parameters") or {}).get("profile"),
                     "pool": (d.get("work_pool") or {}).get("name")}
        if got != want:
            problems.append(f"{label}: registered pipeline {name!r} needs a deployment `{name}-local` with {want} "
                            f"(got {got})")
    return problems
