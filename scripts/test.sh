#!/usr/bin/env bash
# Set up .venv with the test tools and run every check: ruff (lint and format), mypy,
# the docs build, pytest over tests/ and the notebooks (nbval). Runs all checks, then
# exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_venv.sh

# System packages the checks need go here (e.g. a browser for UI tests).
# The browser tests (tests/browser) drive Debian's Chromium with Playwright, which never
# downloads a browser of its own here. Without it they skip, except on CI (CI=true): there
# they fail, so a missing browser cannot pass unnoticed.
install_system_packages() {
    local chromium=${CORTEX_CHROMIUM:-/usr/bin/chromium}
    if [[ -x $chromium ]]; then return 0; fi
    if [[ $chromium == /usr/bin/chromium && $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
        say "installing chromium with apt-get (for the browser tests)"
        if apt-get update -qq >/dev/null \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
            return 0
        fi
        printf 'warning: apt-get could not install chromium.\n' >&2
    fi
    printf 'warning: %s not found, so the browser tests will be skipped (failed on CI).\n' \
        "$chromium" >&2
    printf '  Install it with: sudo apt-get install chromium (Debian/Ubuntu), or set\n' >&2
    printf '  CORTEX_CHROMIUM to a Chromium or Chrome binary.\n' >&2
}

# The MCP tests (tests/runtime/test_mcp.py) run the reference server from npm with node.
# It goes into .cache/npm (git-ignored), at a pinned version, installed only when missing.
# Without node and npm those tests skip, except on CI (CI=true): there they fail.
MCP_EVERYTHING=@modelcontextprotocol/server-everything
MCP_EVERYTHING_VERSION=2026.8.31
install_npm_packages() {
    local dir=.cache/npm
    local manifest=$dir/node_modules/$MCP_EVERYTHING/package.json
    if [[ -f $manifest ]] && grep -q "\"version\": \"$MCP_EVERYTHING_VERSION\"" "$manifest"; then
        return 0
    fi
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        printf 'warning: node or npm not found, so the MCP reference-server tests will be skipped (failed on CI).\n' >&2
        return 0
    fi
    say "installing $MCP_EVERYTHING@$MCP_EVERYTHING_VERSION into $dir (for the MCP tests)"
    npm install --prefix "$dir" --no-save --no-audit --no-fund --loglevel=error \
        "$MCP_EVERYTHING@$MCP_EVERYTHING_VERSION" >/dev/null \
        || printf 'warning: npm could not install %s.\n' "$MCP_EVERYTHING" >&2
}

# The live model (tests/live) builds llama.cpp's server once into the user cache: it needs
# cmake and a C++ compiler. Without them the live tests skip, except on CI: there they fail.
install_build_tools() {
    if command -v cmake >/dev/null && command -v g++ >/dev/null; then return 0; fi
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
        say "installing cmake and g++ with apt-get (to build the live model's server)"
        apt-get update -qq >/dev/null \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ >/dev/null \
            && return 0
    fi
    printf 'warning: cmake or g++ is missing, so the live-model tests will be skipped (failed on CI).\n' >&2
    printf '  Install them with: sudo apt-get install cmake g++\n' >&2
}

install_system_packages
install_build_tools
install_npm_packages
ensure_venv test
export PATH="$PWD/$VENV_DIR/bin:$PATH"
source scripts/_local.sh
ensure_local_model

# The docs site into site/, warnings as errors (a broken link or anchor, a docstring griffe
# cannot read). Not --quiet: that hides the warnings from --strict too, and the build passes.
# Only the warnings and errors are shown; NO_MKDOCS_2_WARNING quiets mkdocs-material's banner
# about its successor.
build_docs() {
    local log status=0
    log=$(mktemp)
    NO_MKDOCS_2_WARNING=1 mkdocs build --strict >"$log" 2>&1 || status=$?
    grep -v '^INFO' "$log" >&2 || true
    rm -f "$log"
    return "$status"
}

failed=()
step() {
    local name=$1
    shift
    say "$name"
    local status=0 start=$SECONDS
    "$@" || status=$?
    printf '    (%s: %d s)\n' "$name" $((SECONDS - start)) >&2
    if [[ $status -eq 5 && $1 == pytest ]]; then
        printf 'error: pytest collected no tests; that counts as a failure.\n' >&2
    fi
    if [[ $status -ne 0 ]]; then failed+=("$name (exit $status)"); fi
}

step "ruff check" ruff check .
step "ruff format --check" ruff format --check .
step "mypy" mypy cortex_jupyter
step "import layers (lint-imports, pyproject.toml)" lint-imports --no-cache
step "docs (mkdocs build --strict)" build_docs
step "notebooks saved without outputs" python scripts/check_notebooks.py notebooks
# One pytest run: --nbval-lax only affects .ipynb files; --nbval-current-env runs the
# notebooks in this .venv's kernel rather than whatever "python3" kernel is installed.
# Two workers (pytest-xdist): most tests wait on kernels, browsers and servers, so two run
# in the time of one and a bit; each file stays whole in one worker, and the live model's
# users share one (tests/conftest.py). CORTEX_TEST_WORKERS=0 runs them in this process.
step "pytest (tests and notebooks)" pytest tests notebooks --nbval-lax --nbval-current-env \
    -n "${CORTEX_TEST_WORKERS:-2}" --dist loadscope

if [[ ${#failed[@]} -gt 0 ]]; then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
say "all checks passed in $SECONDS s"
