# MLflow tracking server with the Postgres driver and the S3 client it needs for MinIO artifacts
# (the upstream MLflow image ships neither). Same MLflow version as pyproject.toml.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1

RUN pip install "mlflow==3.17.2" "psycopg2-binary==2.9.13" "boto3==1.44.8" \
 && useradd --create-home --uid 1000 mlflow

USER mlflow
EXPOSE 5000
CMD ["mlflow", "server", "--host=0.0.0.0", "--port=5000"]
