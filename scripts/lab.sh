#!/usr/bin/env bash
# Set up .venv and open the quickstart notebook in JupyterLab.
#   bash scripts/lab.sh                      # opens a browser tab
#   bash scripts/lab.sh --no-browser --port 8899   # extra options go to `jupyter lab`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_venv.sh

ensure_venv ""

extra_args=()
# Jupyter refuses to start as root unless told that this is intended (containers, CI).
if [[ $EUID -eq 0 ]]; then extra_args+=(--allow-root); fi

say "starting JupyterLab (Ctrl+C to stop)"
exec "$VENV_DIR/bin/jupyter" lab notebooks/01_quickstart.ipynb \
    ${extra_args[@]+"${extra_args[@]}"} "$@"
