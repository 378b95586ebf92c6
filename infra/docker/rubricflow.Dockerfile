# The rubricflow image: project code + pinned dependencies (pyproject.toml) on a CUDA toolchain. Used by the
# compose process worker, the Kubernetes work pool's flow-run pods and DeepSpeed ranks. Build from the repo root:
#   docker build -f infra/docker/rubricflow.Dockerfile -t rubricflow:0.1.0 .
# The code lives in /app (= RUBRICFLOW_ROOT, the directory prefect.yaml's pull step changes into); run state
# (.rubricflow: caches, HF models, compiled DeepSpeed ops), data/ and artifacts/ are volumes.
#
# CUDA devel (nvcc) because DeepSpeed JIT-compiles its CUDA ops on first use; keep the CUDA major version equal
# to the one torch (pinned in pyproject.toml) was built with.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    RUBRICFLOW_ROOT=/app \
    HF_HOME=/app/.rubricflow/hf \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    DVC_NO_ANALYTICS=1 \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1

# python3 (3.12 on Ubuntu 24.04; pyproject allows >=3.11,<3.13), git for DVC and MLflow's commit tags,
# pdsh + ssh for DeepSpeed's multi-node launcher.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev git pdsh openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv \
 && useradd --create-home --uid 1001 rubricflow

WORKDIR /app

# Dependencies first, from pyproject.toml alone (this layer is reused while only the code changes); the ray extra
# lets the image serve as a Ray worker for studies on a cluster.
COPY pyproject.toml README.md ./
RUN mkdir -p rubricflow models tasks flows \
 && touch rubricflow/__init__.py models/__init__.py tasks/__init__.py flows/__init__.py \
 && pip install '.[ray]' \
 && pip uninstall -y rubricflow

# Then the project itself, editable so that /app is the imported code.
COPY . .
RUN pip install --no-deps -e . \
 && mkdir -p .rubricflow artifacts data \
 && chown -R rubricflow:rubricflow /app

USER rubricflow
CMD ["rubricflow", "--help"]
