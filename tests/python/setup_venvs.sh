#!/usr/bin/env bash
# Creates the Python virtual environments the end-to-end tests drive Turnstile with:
#   target/python/mcp1  — the official `mcp` SDK, 1.x line (protocol 2025-11-25, sessions)
#   target/python/mcp2  — the official `mcp` SDK, 2.x line (protocol 2026-07-28, no sessions)
# Idempotent: a venv that already has the pinned version is left alone.
# Usage: tests/python/setup_venvs.sh [TARGET_DIR]   (default: <repo>/target)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target="${1:-${CARGO_TARGET_DIR:-$repo/target}}"
python="${PYTHON:-python3}"

if ! command -v "$python" >/dev/null 2>&1; then
    echo "setup_venvs.sh: '$python' not found; install Python 3.10+ (e.g. apt-get install python3 python3-venv)" >&2
    exit 2
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
    echo "setup_venvs.sh: the mcp SDK needs Python >= 3.10, '$python' is $("$python" --version 2>&1)" >&2
    exit 2
fi

setup() {
    local name="$1" requirements="$2"
    local venv="$target/python/$name"
    local pinned
    pinned="$(sed -n 's/^mcp==\([^[:space:]]*\).*/\1/p' "$requirements")"
    if [ -x "$venv/bin/python" ] &&
        [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)" = "$pinned" ]; then
        echo "setup_venvs.sh: $venv already has mcp==$pinned"
        return 0
    fi
    echo "setup_venvs.sh: creating $venv with mcp==$pinned"
    rm -rf "$venv"
    mkdir -p "$target/python"
    if ! "$python" -m venv "$venv"; then
        echo "setup_venvs.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
        exit 3
    fi
    if ! "$venv/bin/python" -m pip install --quiet -r "$requirements"; then
        rm -rf "$venv"
        echo "setup_venvs.sh: pip could not install $requirements (is PyPI reachable?)" >&2
        exit 4
    fi
    "$venv/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$pinned', m.version('mcp')"
}

setup mcp1 "$here/requirements-mcp1.txt"
setup mcp2 "$here/requirements-mcp2.txt"
