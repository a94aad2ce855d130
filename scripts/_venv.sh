# Shared by lab.sh and test.sh (sourced, not run): make sure .venv exists and holds
# this project, installing only when pyproject.toml changed since the last install.
# Needs nothing but Python 3.10+ with pip; set PYTHON to choose the interpreter.

VENV_DIR=.venv

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

hash_file() {
    "$VENV_DIR/bin/python" -c \
        'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"
}

# A Debian/Ubuntu python3 without python3-venv cannot make virtualenvs; fix that when we may.
install_venv_support() {
    local python=$1
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null \
        && [[ $(command -v "$python") == /usr/bin/* ]]; then
        local version
        version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        say "installing python${version}-venv with apt-get"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${version}-venv"
    else
        return 1
    fi
}

create_venv() {
    local python=${PYTHON:-python3}
    command -v "$python" >/dev/null || die "$python not found; install Python 3.10 or newer."
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is $("$python" --version 2>&1); cortex_jupyter needs Python 3.10 or newer (set PYTHON=...)."
    say "creating $VENV_DIR with $("$python" --version 2>&1)"
    rm -rf "$VENV_DIR"
    if ! "$python" -m venv "$VENV_DIR"; then
        rm -rf "$VENV_DIR"
        install_venv_support "$python" \
            || die "'$python -m venv' failed. On Debian/Ubuntu: apt-get install python3-venv"
        "$python" -m venv "$VENV_DIR"
    fi
}

# ensure_venv EXTRA: install the project (with the optional-dependency group EXTRA, or
# none for "") unless the stamp in .venv says this pyproject.toml is installed already.
ensure_venv() {
    local extra=$1 target=. stamps
    if [[ -n $extra ]]; then target=".[$extra]"; fi
    # The test install is a superset of the plain one, so it satisfies lab.sh too.
    stamps=("$VENV_DIR/.cortex-installed-${extra:-base}" "$VENV_DIR/.cortex-installed-test")

    if ! "$VENV_DIR/bin/python" -m pip --version >/dev/null 2>&1; then
        create_venv
    fi
    local hash stamp
    hash=$(hash_file pyproject.toml)
    for stamp in "${stamps[@]}"; do
        if [[ -f $stamp && $(<"$stamp") == "$hash" ]]; then
            say "$VENV_DIR is up to date ($target)"
            return 0
        fi
    done
    say "installing $target into $VENV_DIR"
    "$VENV_DIR/bin/python" -m pip install --disable-pip-version-check --quiet -e "$target"
    printf '%s\n' "$hash" >"${stamps[0]}"
}
