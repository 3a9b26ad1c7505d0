#!/usr/bin/env bash
# The release artifacts of this checkout, in one command:
#
#   dist/vmem_lsp-VERSION.tar.gz            the sdist (with tests/, tests/data and examples/)
#   dist/vmem_lsp-VERSION-py3-none-any.whl  the wheel, built from that sdist
#   dist/vmem-lsp-VERSION.vsix              the VS Code extension for linux-x64: the esbuild bundle
#                                           and the server's Python code (that wheel's vmem_lsp,
#                                           pygls, lsprotocol, libcst, ... for CPython 3.11-3.13,
#                                           editors/vscode/scripts/bundle_python.sh)
#
# VERSION is pyproject.toml's. editors/vscode/package.json and vmem_lsp/__init__.py must say
# the same (tests/test_packaging.py checks it too): the build stops when they drift.
# The Python artifacts are twine-checked (--strict); the .vsix is checked for the version, its
# target platform, the bundle inside it and the bundled Python (vmem_lsp and libcst's native
# module for each CPython version).
#
#   scripts/build_artifacts.sh                      # all three, into dist/
#   scripts/build_artifacts.sh --no-vsix            # the Python ones only (no Node needed)
#   scripts/build_artifacts.sh --outdir DIR ...     # into DIR (.ci/run's wheel step)
#   scripts/build_artifacts.sh --committed ...      # the Python ones from HEAD, not the working tree
#
# PYTHON: the interpreter with `build` and `twine` (default .venv/bin/python; both are in
# the test extras). The extension's node_modules are installed with `npm ci` when
# package-lock.json or node changed (as editors/vscode/test/ui/run.sh does). The .vsix's Python
# dependencies come from PyPI (pip's cache serves a warm run; see bundle_python.sh).
# The Python artifacts are built from a copy of the working tree's files that git does not ignore
# (what the tests see: uncommitted changes and new files included), or with --committed of HEAD's:
# never from the checkout itself, where a stale vmem_lsp.egg-info/SOURCES.txt would put files in
# the sdist that MANIFEST.in no longer asks for.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
VSIX=1
COMMITTED=0
DIST=$ROOT/dist
while [ $# -gt 0 ]; do
  case "$1" in
    --no-vsix) VSIX=0 ;;
    --committed) COMMITTED=1 ;;
    --outdir) [ $# -ge 2 ] || { echo "build_artifacts.sh: --outdir needs a folder" >&2; exit 2; }
              mkdir -p "$2"; DIST=$(cd "$2" && pwd); shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "build_artifacts.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
T0=$(date +%s)
say() { echo "== build_artifacts $(date +%T) (+$(( $(date +%s) - T0 )) s) $*"; }
die() { echo "build_artifacts.sh: FAILED: $*" >&2; exit 1; }

# The source to build the Python artifacts from.
STAGE=$(mktemp -d); LOG=$STAGE/build.log; trap 'rm -rf "$STAGE"' EXIT
if [ "$COMMITTED" = 1 ]; then
  mkdir "$STAGE/src" && git archive HEAD | tar -x -C "$STAGE/src"
  SRC=$STAGE/src
  say "from HEAD $(git rev-parse --short HEAD)"
elif git rev-parse --git-dir > /dev/null 2>&1; then
  "$PYTHON" - "$STAGE/src" <<'EOF'
import shutil, subprocess, sys
from pathlib import Path
listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        capture_output=True, check=True).stdout.decode().split("\0")
for name in sorted(set(listed)):
    if name and Path(name).is_file() and name.split("/")[0] != "dist":   # a deleted file is left out
        (Path(sys.argv[1]) / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(name, Path(sys.argv[1]) / name)
EOF
  SRC=$STAGE/src
else
  SRC=$ROOT                                               # an unpacked sdist: no git to ask
fi

# The one version, and the places that repeat it (in the source that is built).
VERSION=$(cd "$SRC" && "$PYTHON" - <<'EOF'
import json, re, sys, tomllib
from pathlib import Path
py = tomllib.loads(Path("pyproject.toml").read_text())["project"]["version"]
found = {
    "editors/vscode/package.json": json.loads(Path("editors/vscode/package.json").read_text())["version"],
    "vmem_lsp/__init__.py": re.search(r'^__version__ = "([^"]+)"', Path("vmem_lsp/__init__.py").read_text(), re.M)[1],
}
drift = [f"{path} says {v}" for path, v in found.items() if v != py]
if drift:
    sys.exit(f"pyproject.toml says {py}, but " + "; ".join(drift) + ": make them equal")
print(py)
EOF
) || die "the versions differ"
say "version $VERSION"
mkdir -p "$DIST"
rm -f "$DIST/vmem_lsp-$VERSION.tar.gz" "$DIST/vmem_lsp-$VERSION-py3-none-any.whl" "$DIST/vmem-lsp-$VERSION.vsix"

# 1. sdist, then the wheel from the unpacked sdist (so the sdist is known to build).
say "python -m build"
"$PYTHON" -m build --outdir "$DIST" "$SRC" > "$LOG" 2>&1 || { cat "$LOG"; die "python -m build"; }
SDIST=$DIST/vmem_lsp-$VERSION.tar.gz
WHEEL=$DIST/vmem_lsp-$VERSION-py3-none-any.whl
[ -f "$SDIST" ] && [ -f "$WHEEL" ] || { cat "$LOG"; die "no $SDIST or $WHEEL"; }
"$PYTHON" -m twine check --strict "$SDIST" "$WHEEL" || die "twine check"
"$PYTHON" - "$SDIST" <<'EOF' || die "the sdist lacks what the tests need"
import sys, tarfile
names = {n.split("/", 1)[1] for n in tarfile.open(sys.argv[1]).getnames() if "/" in n}
need = ["tests/conftest.py", "tests/data/reports", "examples/copy_whole.py", "bench/model_results.jsonl"]
missing = [n for n in need if not any(x == n or x.startswith(n + "/") for x in names)]
sys.exit(f"missing in {sys.argv[1]}: {missing}" if missing else 0)
EOF

# 2. The VS Code extension.
if [ "$VSIX" = 1 ]; then
  say "the .vsix (editors/vscode)"
  command -v npm >/dev/null || die "no npm (or run with --no-vsix)"
  cd editors/vscode
  lock_stamp="$(sha256sum package-lock.json | cut -c1-16) $(node -v)"
  if [ "$(cat node_modules/.vmem-lock-stamp 2>/dev/null)" != "$lock_stamp" ]; then
    npm ci --no-audit --no-fund --loglevel=error
    echo "$lock_stamp" > node_modules/.vmem-lock-stamp
  fi
  OUT=$DIST/vmem-lsp-$VERSION.vsix
  # vsce runs the vscode:prepublish script first: esbuild --production, then bundle_python.sh,
  # which installs the wheel built above (the vmem_lsp the .vsix carries is the release's).
  PYTHON="$PYTHON" VMEM_WHEEL="$WHEEL" node_modules/.bin/vsce package --no-dependencies --allow-missing-repository \
    --target linux-x64 -o "$OUT" > "$LOG" 2>&1 \
    || { cat "$LOG"; die "vsce package"; }
  cd "$ROOT"
  "$PYTHON" - "$OUT" "$VERSION" <<'EOF' || die "the .vsix is not what was asked for"
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
version = json.loads(z.read("extension/package.json"))["version"]
if version != sys.argv[2]:
    sys.exit(f"{sys.argv[1]}: version {version}, not {sys.argv[2]}")
names = set(z.namelist())
if "extension/dist/extension.js" not in names:
    sys.exit(f"{sys.argv[1]}: no extension/dist/extension.js")
if 'TargetPlatform="linux-x64"' not in z.read("extension.vsixmanifest").decode():
    sys.exit(f"{sys.argv[1]}: not built for linux-x64")
need = ["extension/bundled/tool/launch.py", "extension/bundled/libs/vmem/vmem_lsp/__init__.py"]
need += [f"extension/bundled/libs/cp3{v}/libcst/native.cpython-3{v}-x86_64-linux-gnu.so" for v in (11, 12, 13)]
need += [f"extension/bundled/libs/cp3{v}/pygls/__init__.py" for v in (11, 12, 13)]
missing = [n for n in need if n not in names]
if missing:
    sys.exit(f"{sys.argv[1]}: lacks the bundled Python: {missing}")
EOF
fi

say "done"
ls -l "$SDIST" "$WHEEL" $([ "$VSIX" = 1 ] && echo "$DIST/vmem-lsp-$VERSION.vsix")
