# laketide image: Airflow 3.3 + PySpark 3.5.9 + Iceberg jars, for the scheduler/workers and Spark drivers.
# (Astronomer users can start FROM their Astro Runtime 3.x image instead and keep the steps below.)
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless libjarjar-java \
      libxerial-sqlite-jdbc-java libpostgresql-jdbc-java curl make \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /usr/local/laketide
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

COPY . .
ENV LAKETIDE_HOME=/usr/local/laketide/.laketide \
    AIRFLOW__CORE__DAGS_FOLDER=/usr/local/laketide/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/usr/local/laketide/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    TZ=UTC
RUN pip install --no-cache-dir --no-deps -e . && python -m laketide.lake.jars

EXPOSE 8080
CMD ["airflow", "standalone"]
