#!/usr/bin/env bash
# Set up laketide on this machine, idempotently: system packages (Java, jarjar, JDBC drivers, and curl
# and pgrep for the quickstart, PostgreSQL for the catalog tests, Chromium and its driver for the browser test of the
# lakehouse view), the .venv virtualenv with the pinned requirements, and the Spark jars.
# A second run does nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(openjdk-17-jre-headless libjarjar-java libxerial-sqlite-jdbc-java libpostgresql-jdbc-java curl procps postgresql chromium chromium-driver)
PYTHON=${PYTHON:-python3.11}
UV_VERSION=0.13.10  # the installer of the pinned requirements (pip installs it)
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing system packages: ${missing[*]}" >&2
    echo "       install them as root: apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "==> installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || {
  echo "error: laketide needs Python 3.11 (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
}

stamp=.venv/.laketide-requirements
want=$(cat requirements.txt requirements-dev.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "==> creating .venv and installing pinned requirements (a few minutes the first time)"
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # uv fetches and unpacks the lock's ~190 wheels side by side, pip one by one (from PyPI, no cache: 54 s against
  # 93 s on two cores, bytecode compiled by both); pip installs them where uv cannot (an index that only pip's own
  # configuration names)
  if .venv/bin/python -m pip install -q "uv==$UV_VERSION" &&
     .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -r requirements-dev.txt &&
     .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .; then
    :
  else
    echo "==> uv could not install the requirements; installing them with pip"
    .venv/bin/python -m pip install -q -r requirements-dev.txt
    .venv/bin/python -m pip install -q --no-deps -e .
  fi
  echo "$want" > "$stamp"
else
  echo "==> .venv is up to date"
fi

echo "==> Spark jars"
.venv/bin/python -m laketide.lake.jars
