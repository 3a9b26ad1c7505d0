#!/usr/bin/env bash
# Puts the language server's Python code into bundled/libs, for the .vsix to carry (as ruff's and
# ty's extensions do), so that the extension works without a `pip install vmem-lsp`:
#
#   bundled/libs/vmem/    vmem_lsp itself, from this checkout (or from VMEM_WHEEL), alone: the
#                         launcher puts only this folder on the PYTHONPATH its children inherit, so
#                         that a worker started as `python -m vmem_lsp worker` finds vmem_lsp and
#                         nothing else of the bundle shadows the project's own packages
#   bundled/libs/cpXY/    the server's dependencies (bundled/requirements.txt: pygls, lsprotocol,
#                         libcst, tqdm and theirs) for CPython X.Y: libcst and PyYAML ship native
#                         wheels per Python version (not abi3), so each version has its folder
#
# bundled/tool/launch.py picks the folder of the interpreter it runs in. Nothing here is committed
# (.gitignore): `npm run package` and scripts/build_artifacts.sh run this before `vsce package`
# (the vscode:prepublish script).
#
#   bash scripts/bundle_python.sh
#
# PYTHON            the Python whose pip installs (default: the repository's .venv/bin/python, else
#                   python3); any version: pip installs for each target version by --python-version
# VMEM_WHEEL        a vmem_lsp wheel to bundle (build_artifacts.sh passes the one it built);
#                   default: a wheel built from the checkout's files that git does not ignore
# VMEM_BUNDLE_PYTHONS  the CPython versions (default "3.11 3.12 3.13")
# The dependencies' folders are kept while requirements.txt and the versions are unchanged.
# Reaches PyPI (pip's cache serves a warm run).
set -euo pipefail
EXT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(cd "$EXT/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON=$REPO/.venv/bin/python; else PYTHON=python3; fi
fi
VERSIONS=${VMEM_BUNDLE_PYTHONS:-"3.11 3.12 3.13"}
LIBS=$EXT/bundled/libs
REQUIREMENTS=$EXT/bundled/requirements.txt
# manylinux wheels: the .vsix is built for linux-x64 (vsce package --target linux-x64).
PLATFORMS=(--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64)
say() { echo "== bundle_python $(date +%T) $*" >&2; }
die() { echo "bundle_python.sh: FAILED: $*" >&2; exit 1; }
pip() { PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip "$@"; }
mkdir -p "$LIBS"

# 0. Each pin of requirements.txt in the range pyproject.toml's `dependencies` allow (the bundled
#    server must be one that `pip install vmem-lsp` could have given).
"$PYTHON" - "$REQUIREMENTS" "$REPO/pyproject.toml" <<'PY' || die "bundled/requirements.txt disagrees with pyproject.toml"
import re, sys, tomllib
from pip._vendor.packaging.requirements import Requirement
pins = [Requirement(line) for line in open(sys.argv[1]).read().splitlines() if line.strip() and not line.startswith("#")]
ranges = {}
for text in tomllib.load(open(sys.argv[2], "rb"))["project"]["dependencies"]:
    r = Requirement(text)
    ranges[re.sub(r"[-_.]+", "-", r.name).lower()] = r.specifier
bad = []
for pin in pins:
    name = re.sub(r"[-_.]+", "-", pin.name).lower()
    (pinned,) = [spec.version for spec in pin.specifier if spec.operator == "=="] or [None]
    if pinned is None:
        bad.append(f"{pin}: not pinned with ==")
    elif name in ranges and not ranges[name].contains(pinned, prereleases=True):
        bad.append(f"{pin}: pyproject.toml asks for {name}{ranges[name]}")
sys.exit("; ".join(bad) if bad else 0)
PY

# 1. The dependencies, one folder per CPython version.
for version in $VERSIONS; do
  tag=cp${version/./}
  stamp="$(cat "$REQUIREMENTS" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16) $version ${PLATFORMS[*]}"
  if [ "$(cat "$LIBS/$tag/.stamp" 2>/dev/null)" = "$stamp" ]; then
    continue
  fi
  say "dependencies for CPython $version into bundled/libs/$tag"
  rm -rf "$LIBS/$tag"
  pip install --quiet --target "$LIBS/$tag" --no-compile --only-binary=:all: --implementation cp \
    --python-version "$version" "${PLATFORMS[@]}" -r "$REQUIREMENTS" \
    || die "pip install of bundled/requirements.txt for CPython $version"
  rm -rf "$LIBS/$tag/bin"   # console scripts (tqdm's) with this machine's paths in them
  find "$LIBS/$tag/libcst" -type d -name tests -prune -exec rm -rf {} +   # libcst's own tests: 1.8 MB
  echo "$stamp" > "$LIBS/$tag/.stamp"
done
for version in $VERSIONS; do   # (a folder kept by its stamp too: it may have been damaged since)
  tag=cp${version/./}
  ls "$LIBS/$tag"/libcst/native.cpython-${tag#cp}-*.so "$LIBS/$tag"/pygls/__init__.py > /dev/null 2>&1 \
    || die "no native libcst or no pygls for CPython $version in bundled/libs/$tag (rm -rf it and run again)"
done
# Versions no longer asked for.
for folder in "$LIBS"/cp*; do
  [ -d "$folder" ] || continue
  case " $VERSIONS " in *" $(basename "$folder" | sed 's/^cp3/3./') "*) ;; *) rm -rf "$folder" ;; esac
done

# 2. vmem_lsp itself, every time (its source changes between builds).
STAGE=$(mktemp -d); trap 'rm -rf "$STAGE"' EXIT
WHEEL=${VMEM_WHEEL:-}
if [ -z "$WHEEL" ]; then
  say "a vmem_lsp wheel from the checkout"
  # The files git does not ignore (uncommitted ones too), as build_artifacts.sh builds from:
  # never the checkout itself, whose stale egg-info could add files.
  # (An unpacked sdist has no git: its files are all wanted, bar caches.)
  (cd "$REPO" && { if git rev-parse --git-dir > /dev/null 2>&1; then
      git ls-files -z --cached --others --exclude-standard -- pyproject.toml README.md LICENSE MANIFEST.in vmem_lsp
    else
      find pyproject.toml README.md LICENSE MANIFEST.in vmem_lsp -type f -not -path '*/__pycache__/*' -print0 2>/dev/null
    fi; } | while IFS= read -r -d '' name; do
        if [ -f "$name" ]; then mkdir -p "$STAGE/src/$(dirname "$name")" && cp "$name" "$STAGE/src/$name"; fi
      done)
  [ -f "$STAGE/src/vmem_lsp/__init__.py" ] || die "no vmem_lsp in $REPO"
  pip wheel --quiet --no-deps --wheel-dir "$STAGE/wheel" "$STAGE/src" > "$STAGE/wheel.log" 2>&1 \
    || { cat "$STAGE/wheel.log" >&2; die "building the vmem_lsp wheel"; }
  WHEEL=$(ls "$STAGE"/wheel/vmem_lsp-*.whl)
fi
say "vmem_lsp from $(basename "$WHEEL") into bundled/libs/vmem"
rm -rf "$LIBS/vmem"
pip install --quiet --no-deps --no-compile --target "$LIBS/vmem" "$WHEEL" || die "pip install $WHEEL"
rm -rf "$LIBS/vmem/bin"
[ -f "$LIBS/vmem/vmem_lsp/__init__.py" ] || die "no vmem_lsp in bundled/libs/vmem"
find "$LIBS" -name __pycache__ -type d -prune -exec rm -rf {} +
say "bundled/libs: $(du -sh "$LIBS" | cut -f1) ($(cd "$LIBS" && ls -d vmem cp* | tr '\n' ' '))"
