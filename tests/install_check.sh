#!/usr/bin/env bash
# install_check.sh BUILD_DIR SRC_DIR - `make install` into a staging prefix and
# use it as a user would: the files are where cmake/install.cmake says,
# libmeganeura.so has its soname and exports exactly the functions the public
# headers declare, examples/mnist_mlp.c builds out of tree with
# `cc app.c $(pkg-config --cflags --libs meganeura)` (and statically with
# `pkg-config --static`) and runs, the installed Python package finds the
# installed library, and DESTDIR stages a /usr install under another root.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
py=${MN_PYTHON:-/usr/bin/python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0
die() { echo "install_check: $*" >&2; exit 1; }
pass() { n=$((n + 1)); }
unset MEGANEURA_LIB MEGANEURA_MNIST LD_LIBRARY_PATH PKG_CONFIG_PATH

stage=$dir/stage
make -s -C "$src" --no-print-directory install-files INSTALL_FROM="$build" PREFIX="$stage" >"$dir/install.log" ||
  { cat "$dir/install.log" >&2; die "make install-files failed"; }
pc=$(find "$stage" -name meganeura.pc)
[ -n "$pc" ] || die "no meganeura.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for h in "$src"/include/*.h; do [ -f "$stage/include/${h##*/}" ] || die "include/${h##*/} not installed"; pass; done
for f in bin/meganeura share/man/man1/meganeura.1 \
         lib/python3/dist-packages/meganeura/__init__.py lib/python3/dist-packages/meganeura/_installed.py; do
  [ -f "$stage/$f" ] || die "$f not installed"; pass
done
for f in libmeganeura.so libmeganeura.so.0 libmeganeura.a; do [ -e "$libdir/$f" ] || die "$libdir/$f missing"; pass; done
"$stage/bin/meganeura" --version | grep -q '^meganeura [0-9]' || die "the installed program does not run"; pass

# the shared library: soname, and exactly the public functions
readelf -d "$libdir/libmeganeura.so" | grep -q 'SONAME.*\[libmeganeura\.so\.0\]' || die "no soname libmeganeura.so.0"; pass
nm -D --defined-only "$libdir/libmeganeura.so" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort -u >"$dir/exported"
# libmeganeura.so declares the functions of every public header but meganeura_mpi.h (libmeganeura_mpi.so)
"$py" - $(ls "$src"/include/*.h | grep -v meganeura_mpi.h) >"$dir/declared" <<'PY'
import re, sys
names = set()
for h in sys.argv[1:]:
    text = re.sub(r"/\*.*?\*/", " ", open(h).read(), flags=re.S)
    names |= set(re.findall(r"(?<![\w(*])\*?\s*(mn_\w+)\s*\(", text))
print("\n".join(sorted(names)))
PY
diff "$dir/declared" "$dir/exported" >"$dir/diff" ||
  { cat "$dir/diff" >&2; die "libmeganeura.so exports (>) other than what the headers declare (<)"; }
[ "$(wc -l <"$dir/exported")" -gt 100 ] || die "too few exports"; pass

# pkg-config, shared and static
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion meganeura)" = "$(sed -n 's/^#define MN_VERSION_STRING "\(.*\)"/\1/p' "$src/include/meganeura.h")" ] ||
  die "meganeura.pc's version is not MN_VERSION_STRING"; pass
cp "$src/examples/mnist_mlp.c" "$dir/app.c"
cd "$dir"
# shellcheck disable=SC2046
cc -o app app.c $(pkg-config --cflags --libs meganeura) || die "the shared build failed"
readelf -d app | grep -q 'NEEDED.*libmeganeura\.so\.0' || die "app does not link libmeganeura.so.0"; pass
LD_LIBRARY_PATH=$libdir ./app >app.out || { cat app.out >&2; die "app (shared) failed"; }
grep -q "held-out accuracy" app.out || die "app printed no accuracy"; pass
# shellcheck disable=SC2046
cc -o app_static app.c $(pkg-config --cflags meganeura) "$libdir/libmeganeura.a" -Wl,--as-needed \
  $(pkg-config --static --libs meganeura) || die "the static build failed"
if readelf -d app_static | grep -q libmeganeura; then die "app_static needs libmeganeura.so"; fi
./app_static >app_static.out || { cat app_static.out >&2; die "app (static) failed"; }
cmp -s app.out app_static.out || die "the static and shared programs disagree"; pass

# the installed Python package finds the installed library by itself
PYTHONPATH=$stage/lib/python3/dist-packages PYTHONDONTWRITEBYTECODE=1 "$py" -c '
import sys, meganeura as mn, numpy as np
assert mn._lib._dll._name.startswith(sys.argv[1]), mn._lib._dll._name
with mn.Graph() as g:
    x = g.input("x", (2,))
    g.output(x * 3.0, "y")
    with mn.Session(g) as s:
        s.run(x=np.array([1, 2], np.float32))
        assert list(s.output("y")) == [3, 6]
' "$stage" || die "the installed Python package does not work"; pass

# DESTDIR: a /usr install staged under $dir/root names /usr in its files
make -s -C "$src" --no-print-directory install-files INSTALL_FROM="$build" PREFIX=/usr DESTDIR="$dir/root" >/dev/null
[ -x "$dir/root/usr/bin/meganeura" ] || die "DESTDIR: no usr/bin/meganeura"; pass
pc=$(find "$dir/root" -name meganeura.pc)
grep -qx 'prefix=/usr' "$pc" || die "DESTDIR: meganeura.pc does not say prefix=/usr"; pass
grep -q "LIBRARY = '/usr/" "$dir/root/usr/lib/python3/dist-packages/meganeura/_installed.py" ||
  die "DESTDIR: the Python package does not name /usr"; pass
echo "install_check: $n passed, 0 failed"
