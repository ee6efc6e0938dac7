# laketide — run `make help` for the targets.
SHELL := /bin/bash
VENV := .venv/bin
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export TZ := UTC

.DEFAULT_GOAL := help

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

setup: ## Install system packages, the .venv virtualenv and the Spark jars (idempotent)
	@scripts/setup.sh

jars: ## Provision the Iceberg/Jackson/JDBC jars for Spark (idempotent, no Maven needed)
	@$(VENV)/python -m laketide.lake.jars

run: setup ## Run laketide on embedded defaults: Airflow standalone + sample producer + continuous writer
	@scripts/run.sh

test: setup ## Set up, lint, and run the whole test suite (real Spark, Iceberg, Airflow) on two workers
	@$(MAKE) --no-print-directory -j2 lint test-jvm bytecode  # side by side: mypy and the archive's writer run use one core each
	@$(VENV)/pytest -q -n 2 --dist loadfile

test-fast: setup test-jvm bytecode ## The quick inner loop: pure and unit tests and the cheapest real-Spark ones (not -m slow)
	@$(VENV)/pytest -q -n 2 --dist loadfile -m "not slow"

test-jvm: ## The test JVMs' class-data-sharing archive of Spark's classes (tests/jvm.py; once per machine and class path)
	@$(VENV)/python -m tests.jvm

bytecode: ## Compile the project's modules once: the hundreds of Python processes the tests start load them compiled
	@$(VENV)/python -m compileall -q include dags plugins spark_jobs tests

check-image: ## The Dockerfile's pip steps in a throwaway virtualenv, the COPY sources, the lock, compose.yaml against the compose spec (no container engine needed)
	@$(VENV)/python scripts/check_image.py --venv

lint: ## ruff and mypy
	@$(VENV)/ruff check .
	@$(VENV)/mypy

bench: setup ## Benchmarks: writer throughput (vs Parquet and Iceberg sinks), status-check cost (100 vs 10k snapshots), maintenance before/after, expiry (Spark action vs core API), the lakehouse view's board on 6 months
	@$(VENV)/python bench/bench_writers.py
	@$(VENV)/python bench/bench_status.py
	@$(VENV)/python bench/bench_maintain.py
	@$(VENV)/python bench/bench_expire.py
	@$(VENV)/python bench/bench_ui.py

submit: ## Run a Spark job by hand as Airflow does: make submit JOB=ingest_stream.py ARGS="--stream clicks --mode incremental"
	@[[ -n "$(JOB)" ]] || { echo 'error: make submit needs JOB, a file of spark_jobs/, e.g. make submit JOB=ingest_stream.py ARGS="--stream clicks --mode incremental" (./laketide submit --help)' >&2; exit 2; }
	@./laketide submit $(JOB) $(ARGS)

reconcile: ## Per-hour report: audit == lake + rejects (exits 1 only for a mismatch, duplicates or a blocking file)
	@./laketide reconcile

status: ## Every hour's state (the hours being written too) and each table's health
	@./laketide status

snapshots: ## The snapshot timeline of each stream's events table (the ids a redo returns to)
	@./laketide snapshots

clean: ## Remove local state (.laketide: catalog, warehouse, landing zone, Airflow home) but keep jars and the tests' JVM archive
	@find .laketide -mindepth 1 -maxdepth 1 ! -name jars ! -name jvm -exec rm -rf {} + 2>/dev/null || true

.PHONY: help setup jars run test test-fast test-jvm bytecode check-image lint bench submit reconcile status snapshots clean
