#!/usr/bin/env bash
# End-to-end test of the VS Code extension in real VS Code (code-server) in headless Chromium.
#
#   bash editors/vscode/test/ui/run.sh
#
# 1. sets up the toolchain idempotently in $VMEM_UI_CACHE (default: <repo>/build/ui-cache, git-
#    ignored): Debian chromium, Node 24 and code-server from the npm registry, playwright-core;
# 2. builds the .vsix (npm ci when package-lock.json changed, then npm run package);
# 3. makes a fresh workspace with copies of examples/copy_whole.py and
#    tests/data/kernels/untileable.py, copy_whole.ipynb (copy_whole.py cut into cells by
#    tests/notebooks.py's write_notebook, with nbformat: it must be installed in $VMEM_PYTHON)
#    and a pyproject.toml that asks for v6e, and user settings
#    with vmemLsp.interpreter = $VMEM_PYTHON
#    (default: <repo>/.venv/bin/python, which must have vmem_lsp installed);
# 4. installs the .vsix into a fresh code-server on a free port of 127.0.0.1;
# 5. runs e2e.js (playwright-core): squiggles, Problems, hover, quick fix, save, status bar, a
#    block-shape compile error (VMEM030) and its fix, the notebook (squiggle and Problems row in its
#    kernel's cell, a save, the quick fix from the cell, the save that clears it), output, and the
#    "not installed" path. Screenshots go to test/ui/output/;
# 6. then the extension as a user gets it on install (issue 44): a clean profile (fresh user data and
#    extensions folders, no vmemLsp.interpreter setting, no Python extension) with the .vsix
#    installed, and a workspace whose .venv has jax[tpu] alone (a link to $VMEM_UI_CACHE/jax-venv,
#    made once by `$VMEM_UI_JAX_PYTHON -m venv` (default python3.11) and pip; checked to have no
#    vmem_lsp, pygls or libcst): e2e.js --bundled sees the compiler's VMEM001 on the BlockSpec lines
#    18 and 19 of copy_whole.py (squiggles and Problems rows) from the bundled server, which the
#    extension ran in that .venv's Python. Screenshots go to test/ui/output/bundled/.
#
# VMEM_UI_ONLY=bundled runs step 6 alone (steps 4 and 5 are skipped).
#
# VMEM_UI_CAPTURE=DIR copies the notebook as VS Code's serializer saved it into DIR:
# vscode-written.ipynb (saved after an edit that keeps it overflowing, before the fix) and
# vscode-fixed.ipynb (saved after the quick fix). tests/data/notebooks/ holds such a capture.
#
# Exits non-zero on any failure; code-server and everything it started are killed on exit.
# Reaches Debian's packages, the npm registry and PyPI (on a cold cache; the .vsix's bundled Python
# and the jax-venv come from PyPI, through pip's cache when warm).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXT=$(cd "$HERE/../.." && pwd)
REPO=$(cd "$EXT/../.." && pwd)
CACHE=${VMEM_UI_CACHE:-$REPO/build/ui-cache}
PYTHON=${VMEM_PYTHON:-$REPO/.venv/bin/python}
OUT=$HERE/output
CAPTURE=""
if [ -n "${VMEM_UI_CAPTURE:-}" ]; then   # (resolved here, before any cd)
  mkdir -p "$VMEM_UI_CAPTURE" && CAPTURE=$(cd "$VMEM_UI_CAPTURE" && pwd)
fi
RUN=$CACHE/run
T0=$(date +%s)
say() { echo "== ui $(date +%T) (+$(( $(date +%s) - T0 )) s) $*"; }
die() { echo "run.sh: FAILED: $*" >&2; exit 1; }

[ -x "$PYTHON" ] || die "no Python at $PYTHON (set VMEM_PYTHON to an interpreter with vmem_lsp installed)"
(cd / && "$PYTHON" -c "import vmem_lsp") || die "$PYTHON cannot import vmem_lsp (pip install -e $REPO)"
BAD_PYTHON=${VMEM_UI_BAD_PYTHON:-/usr/bin/python3}   # for the "not installed" check
ONLY=${VMEM_UI_ONLY:-}   # "bundled": step 6 alone (the clean profile), skipping steps 4 and 5
if (cd / && "$BAD_PYTHON" -c "import vmem_lsp" 2>/dev/null); then
  die "$BAD_PYTHON has vmem_lsp: set VMEM_UI_BAD_PYTHON to a Python without it"
fi

# 1. Toolchain.
say "toolchain in $CACHE"
setup_vars=$(VMEM_UI_CACHE="$CACHE" bash "$HERE/setup.sh") || die "toolchain set-up failed"
eval "$setup_vars"      # NODE_DIR, CS_ENTRY, TOOLS_MODULES

# The workspace .venv of step 6: jax[tpu] and nothing of vmem-lsp, made once.
JAX_VENV=$CACHE/jax-venv
JAX_PINS="jax[tpu]==0.10.2 libtpu==0.0.42.1"
JAX_PYTHON=${VMEM_UI_JAX_PYTHON:-python3.11}
if [ "$(cat "$JAX_VENV/.stamp" 2>/dev/null)" != "$JAX_PINS" ]; then
  say "a venv with $JAX_PINS alone in $JAX_VENV ($JAX_PYTHON)"
  rm -rf "$JAX_VENV"
  "$JAX_PYTHON" -m venv "$JAX_VENV" || die "$JAX_PYTHON -m venv $JAX_VENV"
  "$JAX_VENV/bin/python" -m pip install --quiet --disable-pip-version-check $JAX_PINS > "$CACHE/jax-venv.log" 2>&1 \
    || { cat "$CACHE/jax-venv.log"; die "pip install $JAX_PINS into $JAX_VENV"; }
  echo "$JAX_PINS" > "$JAX_VENV/.stamp"
fi
(cd / && "$JAX_VENV/bin/python" -c "import jax, libtpu") || die "$JAX_VENV cannot import jax and libtpu"
for module in vmem_lsp pygls libcst; do
  if (cd / && "$JAX_VENV/bin/python" -c "import $module" 2>/dev/null); then
    die "$JAX_VENV can import $module: it must have jax[tpu] alone"
  fi
done

# 2. The .vsix, built with the machine's node and npm as a developer would (npm run package bundles
#    the server's Python: scripts/bundle_python.sh).
say "building the .vsix"
cd "$EXT"
lock_stamp="$(sha256sum package-lock.json | cut -c1-16) $(node -v)"
if [ "$(cat node_modules/.vmem-lock-stamp 2>/dev/null)" != "$lock_stamp" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_stamp" > node_modules/.vmem-lock-stamp
fi
npm run --silent package > "$CACHE/package.log" 2>&1 || { cat "$CACHE/package.log"; die "npm run package failed"; }
VSIX=$EXT/vmem-lsp.vsix
[ -f "$VSIX" ] || die "no $VSIX"
say "built $(basename "$VSIX") ($(du -k "$VSIX" | cut -f1) KiB)"

# 3. A fresh workspace, user data, extensions folder and code-server config.
rm -rf "$RUN" "$OUT"
mkdir -p "$RUN/ws" "$RUN/user-data/User" "$RUN/extensions" "$OUT"
cp "$REPO/examples/copy_whole.py" "$RUN/ws/"
cp "$REPO/tests/data/kernels/untileable.py" "$RUN/ws/"   # a block shape the TPU cannot tile (VMEM030)
# The seed's overflow as a Jupyter notebook: copy_whole.py cut into cells, written by nbformat.
(cd "$REPO/tests" && "$PYTHON" -c 'import sys; from pathlib import Path; from support.notebooks import write_notebook
write_notebook([Path(sys.argv[1])], Path(sys.argv[2]))' "$REPO/examples/copy_whole.py" "$RUN/ws/copy_whole.ipynb") \
  || die "writing copy_whole.ipynb failed (is nbformat installed in $PYTHON?)"
printf '[tool.vmem-lsp]\ntargets = ["v6e"]\n' > "$RUN/ws/pyproject.toml"
SETTINGS=$RUN/user-data/User/settings.json
# The settings of both profiles but vmemLsp.interpreter (the clean profile of step 6 has none).
COMMON_SETTINGS=$(cat <<'EOF'
  "chat.disableAIFeatures": true,
  "editor.autoClosingBrackets": "never",
  "editor.autoClosingQuotes": "never",
  "editor.autoIndent": "none",
  "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false,
  "extensions.ignoreRecommendations": true,
  "files.autoSave": "off",
  "git.enabled": false,
  "notebook.lineNumbers": "on",
  "security.workspace.trust.enabled": false,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "workbench.editorAssociations": { "*.ipynb": "jupyter-notebook" },
  "workbench.enableExperiments": false,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false
EOF
)
printf '{\n  "vmemLsp.interpreter": "%s",\n%s\n}\n' "$PYTHON" "$COMMON_SETTINGS" > "$SETTINGS"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'bind-addr: 127.0.0.1:%s\nauth: none\ncert: false\n' "$PORT" > "$RUN/config.yaml"
CS_USER_DATA=$RUN/user-data
CS_EXTENSIONS=$RUN/extensions
code_server() {
  "$NODE_DIR/bin/node" "$CS_ENTRY" --config "$RUN/config.yaml" --bind-addr "127.0.0.1:$PORT" --auth none \
    --disable-telemetry --disable-update-check --disable-workspace-trust --disable-getting-started-override \
    --user-data-dir "$CS_USER_DATA" --extensions-dir "$CS_EXTENSIONS" "$@"
}

# 4. Install the .vsix, start code-server, and make sure it and all it starts die with us.
if [ "$ONLY" != bundled ]; then
  say "installing the .vsix into code-server"
  code_server --install-extension "$VSIX" --force > "$RUN/install.log" 2>&1 || { cat "$RUN/install.log"; die "installing the .vsix failed"; }
  code_server --list-extensions --show-versions 2>/dev/null | grep -q '^vmem-lsp.vmem-lsp@' || die "the extension is not listed after install"
fi

CS_PID=""
E2E_PID=""
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$child"; descendants "$child"; done
}
ours() {   # processes started in or on this run's folder (the vmem-lsp worker has its own session)
  local p cmd cwd
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    cmd=$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null ) || continue
    cwd=$(readlink "$p/cwd" 2>/dev/null) || cwd=""
    if [[ "$cmd" == *"$RUN/"* || "$cwd" == "$RUN" || "$cwd" == "$RUN/"* ]]; then
      echo "${p#/proc/}"
    fi
  done
}
stop_all() {   # code-server, e2e.js and all they started
  local pids="" p alive
  for p in $E2E_PID $CS_PID; do pids="$pids $p $(descendants "$p")"; done
  pids=$(echo $pids $(ours) | tr ' ' '\n' | sort -u | tr '\n' ' ')
  if [ -n "${pids// /}" ]; then
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 20); do
      alive=""; for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
      [ -z "$alive" ] && break; sleep 0.25
    done
    [ -n "${alive:-}" ] && kill -KILL $alive 2>/dev/null || true
  fi
  CS_PID=""
}
cleanup() {
  local rc=$? left
  stop_all
  left=$(ours)
  if [ -n "$left" ]; then
    echo "run.sh: processes left behind: $left" >&2
    kill -KILL $left 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_code_server LOG: in the background (CS_PID) with $CS_USER_DATA and $CS_EXTENSIONS, on $PORT.
start_code_server() {
  say "starting code-server on 127.0.0.1:$PORT"
  setsid bash -c 'cd "$1" && shift && exec "$@"' _ "$RUN" "$NODE_DIR/bin/node" "$CS_ENTRY" \
    --config "$RUN/config.yaml" --bind-addr "127.0.0.1:$PORT" --auth none \
    --disable-telemetry --disable-update-check --disable-workspace-trust --disable-getting-started-override \
    --user-data-dir "$CS_USER_DATA" --extensions-dir "$CS_EXTENSIONS" > "$1" 2>&1 &
  CS_PID=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
    kill -0 "$CS_PID" 2>/dev/null || { cat "$1"; die "code-server exited"; }
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || die "code-server did not answer on 127.0.0.1:$PORT"
}

# run_e2e WS OUT LOG [e2e.js arguments]: e2e.js against the running code-server (its $CS_USER_DATA) on
# the workspace WS, screenshots to OUT; on failure, the extension host's log and where to look.
run_e2e() {
  local ws=$1 out=$2 log=$3 rc
  shift 3
  say "running e2e.js $*"
  set +e
  VMEM_UI_URL="http://127.0.0.1:$PORT/?folder=$ws" VMEM_UI_WS="$ws" VMEM_UI_OUT="$out" \
    VMEM_UI_SETTINGS="$CS_USER_DATA/User/settings.json" VMEM_UI_BAD_PYTHON="$BAD_PYTHON" VMEM_UI_CAPTURE="$CAPTURE" \
    NODE_PATH="$TOOLS_MODULES" "$NODE_DIR/bin/node" "$HERE/e2e.js" "$@" &
  E2E_PID=$!
  wait "$E2E_PID"
  rc=$?
  E2E_PID=""
  set -e
  if [ "$rc" != 0 ]; then
    echo "--- the extension host's log (vmem-lsp output channel) ---" >&2
    find "$CS_USER_DATA/logs" -name '*VMEM*' -exec tail -n 40 {} + >&2 2>/dev/null || true
    die "e2e.js $* failed (exit $rc); screenshots in $out, code-server's log in $log"
  fi
}
if [ "$ONLY" != bundled ]; then
  start_code_server "$RUN/code-server.log"

  # 5. The browser test.
  run_e2e "$RUN/ws" "$OUT" "$RUN/code-server.log"
  say "PASS with vmemLsp.interpreter = $PYTHON (screenshots in $OUT)"
  if [ -n "$CAPTURE" ]; then
    say "VS Code's saves of the notebook in $CAPTURE: $(cd "$CAPTURE" && ls vscode-*.ipynb | tr '\n' ' ')"
  fi
  stop_all
fi

# 6. The clean profile: the .vsix as installed, no setting, a .venv with jax[tpu] alone.
CLEAN=$RUN/clean
CS_USER_DATA=$CLEAN/user-data
CS_EXTENSIONS=$CLEAN/extensions
mkdir -p "$CLEAN/ws" "$CS_USER_DATA/User" "$CS_EXTENSIONS" "$OUT/bundled"
cp "$REPO/examples/copy_whole.py" "$CLEAN/ws/"
printf '[tool.vmem-lsp]\ntargets = ["v6e"]\n' > "$CLEAN/ws/pyproject.toml"
ln -s "$JAX_VENV" "$CLEAN/ws/.venv"
printf '{\n%s\n}\n' "$COMMON_SETTINGS" > "$CS_USER_DATA/User/settings.json"
if grep -q vmemLsp "$CS_USER_DATA/User/settings.json"; then die "the clean profile has vmemLsp settings"; fi
say "installing the .vsix into a clean profile"
code_server --install-extension "$VSIX" --force > "$CLEAN/install.log" 2>&1 || { cat "$CLEAN/install.log"; die "installing the .vsix failed"; }
installed=$(code_server --list-extensions 2>/dev/null)
[ "$installed" = "vmem-lsp.vmem-lsp" ] || die "the clean profile has other extensions than ours: $installed"
start_code_server "$CLEAN/code-server.log"
run_e2e "$CLEAN/ws" "$OUT/bundled" "$CLEAN/code-server.log" --bundled
say "PASS with the bundled server in a clean profile (screenshots in $OUT/bundled)"
