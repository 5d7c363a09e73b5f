#!/usr/bin/env bash
# Installs everything opfuse's build and tests need, from Debian 12 packages (see README.md).
#
# What needs what (CMakeLists.txt, tests/CMakeLists.txt, scripts/test.sh):
#   cmake ninja-build g++          configure + build (presets use Ninja; cmake >= 3.25)
#   clang libclang-rt-14-dev       the asan preset: clang with ASan/UBSan and libFuzzer runtimes
#   libfmt-dev nlohmann-json3-dev libcli11-dev   find_package(fmt / nlohmann_json / CLI11)
#   libgtest-dev googletest        find_package(GTest) for the test binaries
#   python3                        tools/gen_op_docs.py (the op_docs_current test)
#   python3-pytest python3-numpy   tests/python (scripts/test.sh's pytest step)
#   pybind11-dev libdlpack-dev     the Python module (python/, OPFUSE_PYTHON; on when pybind11 is found)
#   libpcre2-dev libicu-dev        tokenizer.json: PCRE2 (pre-tokenizer regexes) and ICU uc (NFC), linked statically
# CUDA is optional and not installed here: the build enables the CUDA backend when nvcc is
# found, and links NVRTC for CPU-side kernel compile checks when the toolkit is present.
#
# Idempotent: when every package is already installed it does nothing (no apt-get update).
# Runs as root, or through sudo when not root and sudo exists.
set -euo pipefail

PACKAGES=(cmake ninja-build g++ clang libclang-rt-14-dev libcli11-dev nlohmann-json3-dev libfmt-dev
          libgtest-dev googletest python3 python3-pytest libsentencepiece-dev
          python3-numpy pybind11-dev libdlpack-dev libpcre2-dev libicu-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
