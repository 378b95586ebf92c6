-- Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d), as POSTGRES_USER,
-- who therefore owns both databases.
CREATE DATABASE prefect;
CREATE DATABASE mlflow;
