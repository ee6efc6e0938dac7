# laketide's one image: Airflow 3.3 (api-server, scheduler, triggerer, dag-processor, Celery worker), the Spark
# drivers the Airflow tasks start, a Spark standalone master or worker, and the sample producer (compose.yaml runs
# each as a service of this image).
#
# Base: the official slim Python 3.11 image on Debian bookworm, not the official Airflow image. laketide's
# requirements.txt is a complete lock (Airflow 3.3.2, the Spark provider 5.6.0, PySpark 3.5.9, pyiceberg, Great
# Expectations, the PostgreSQL and Celery drivers) that CI resolves in a clean virtualenv
# (scripts/check_image.py): on a bare Python the image holds that lock and nothing else. The Airflow image
# brings its own constraint set and some thirty providers whose pins would have to be reconciled with the lock
# (and PySpark must stay 3.5.9: a newer Spark provider pulls pyspark-client 4.x over it), and it is Debian
# bookworm underneath as well, so nothing is gained for Java. Astronomer users who must start from their
# runtime image keep the steps below from "apt-get" on.
FROM python:3.11-slim-bookworm

# Java for Spark, jarjar to build the Iceberg runtime's Jackson companion jar, the JDBC drivers of the catalog
# (PostgreSQL; SQLite for a one-container trial), procps for Spark's scripts, curl for health checks
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless libjarjar-java \
      libxerial-sqlite-jdbc-java libpostgresql-jdbc-java procps curl \
 && rm -rf /var/lib/apt/lists/*

# The virtualenv's path is the Python the Spark executors start (spark.python): the same image on every node
# gives the same path with the same PySpark.
ENV VIRTUAL_ENV=/opt/laketide/venv \
    PATH=/opt/laketide/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TZ=UTC
RUN python -m venv "$VIRTUAL_ENV"

WORKDIR /opt/laketide/app
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

# the project: its package, DAGs, UI plugin, Spark entry points, configuration and commands
COPY pyproject.toml README.md laketide ./
COPY include/ include/
COPY dags/ dags/
COPY plugins/ plugins/
COPY spark_jobs/ spark_jobs/
COPY conf/ conf/
COPY scripts/ scripts/

# The jars go in the image, outside the state folder ($LAKETIDE_HOME), which compose mounts as shared storage.
# LAKETIDE_HOME: warehouse, checkpoints, landing zones and action records; one volume that every Airflow worker,
# every Spark worker and the producer mount at the same path.
ENV LAKETIDE_HOME=/data/laketide \
    LAKETIDE__SPARK__JARS_DIR=/opt/laketide/jars \
    LAKETIDE__SPARK__PYTHON=/opt/laketide/venv/bin/python \
    AIRFLOW_HOME=/opt/laketide/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/laketide/app/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/laketide/app/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
RUN pip install --no-cache-dir --no-deps -e . \
 && python -m laketide.lake.jars \
 && useradd --uid 50000 --gid 0 --home-dir /opt/laketide --no-create-home laketide \
 && mkdir -p /data/laketide "$AIRFLOW_HOME" \
 && chown -R laketide:0 /data /opt/laketide/airflow /opt/laketide/jars

USER laketide
EXPOSE 8080 7077 8081
CMD ["airflow", "version"]
