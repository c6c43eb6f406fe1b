#!/usr/bin/env bash
# The first page on a fresh machine: a Debian 12 root made with debootstrap (minbase, plus what
# the project's machines come with: Python 3.11, Java 17, Maven, gcc, and this machine's Node
# and Go, its CA certificates and package-manager settings), this checkout's HEAD cloned into
# it, `make up` run there in a chroot. Prints, and writes to bench/results/first_page-<stamp>.json,
# the seconds from `make up` to the sign-in page answering 200 and to the README's first job
# (2 nodes x 2 tasks on Slurm, through the CLI) ended.
#
# Needs root and debootstrap, and this machine's own services stopped (`scripts/portal stop;
# platform/services/down`): the chroot's take the same ports. It changes the host's nftables
# table `inet torus` (the chroot's firewall): run `platform/services/up` after it.
# Usage: bench/first_page.sh [DIR]   (DIR: where the root is made, default a new one under
# /var/tmp; removed at the end either way)
set -euo pipefail
repo=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
base=${1:-$(mktemp -d /var/tmp/torus-fresh.XXXXXX)}
root=$base/root
url=http://127.0.0.1:8000

(($(id -u) == 0)) || { echo "bench/first_page.sh: run as root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "bench/first_page.sh: apt-get install debootstrap" >&2; exit 2; }
if curl -s -o /dev/null --max-time 2 "$url/healthz"; then
  echo "bench/first_page.sh: a portal answers on $url: stop this machine's platform first" >&2
  exit 2
fi

in_root() { # the chroot's processes, by their root directory
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [[ $r == "$root" || $r == "$root"/* ]] && echo "${p#/proc/}"
  done
  return 0
}
cleanup() {
  in_root | xargs -r kill -9 2>/dev/null || true
  sleep 1
  umount -R -l "$root/proc" "$root/sys" "$root/dev" 2>/dev/null || true
  umount -l "$root" 2>/dev/null || true
  rm -rf "$base"
}
trap cleanup EXIT

echo "first_page: debootstrap into $root"
debootstrap --variant=minbase \
  --include=ca-certificates,make,git,procps,python3,python3-venv,openjdk-17-jdk-headless,maven,gcc,g++,curl \
  bookworm "$root" http://deb.debian.org/debian >"$base/debootstrap.log" 2>&1
# what the project's machines come with besides Debian's packages
cp /etc/resolv.conf "$root/etc/"
[[ ! -f /etc/apt/sources.list.d/debian.sources ]] || {
  rm -f "$root/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
}
cp /usr/local/share/ca-certificates/* "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
for f in /etc/pip.conf /etc/npmrc /root/.npmrc; do [[ ! -f $f ]] || cp "$f" "$root$f"; done
chroot "$root" update-ca-certificates >/dev/null 2>&1
if [[ -x /usr/bin/node && -d /usr/lib/node_modules/npm ]]; then
  cp /usr/bin/node "$root/usr/bin/node"
  cp -a /usr/lib/node_modules "$root/usr/lib/"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/bin/npx"
fi
[[ ! -d /usr/local/go ]] || cp -a /usr/local/go "$root/usr/local/go"
# "/" a mount point of its own (Java finds a file's store in the mount table), then the kernel's
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
git clone -q "$repo" "$root/root/torus"

env_fresh=(/usr/bin/env -i HOME=/root LANG=C.UTF-8
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt SSL_CERT_DIR=/etc/ssl/certs
  REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt
  NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt)
start=$(date +%s)
echo "first_page: make up (log: $root/root/make-up.log)"
chroot "$root" "${env_fresh[@]}" /bin/bash -c 'cd /root/torus && make up' >"$root/root/make-up.log" 2>&1 &
up=$!
page=
until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/login") == 200 ]]; do
  if ! kill -0 "$up" 2>/dev/null && [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/login") != 200 ]]; then
    echo "first_page: make up ended without a sign-in page; the log's end:" >&2
    tail -20 "$root/root/make-up.log" >&2
    exit 1
  fi
  sleep 2
done
page=$(($(date +%s) - start))
echo "first_page: the sign-in page answered 200 after $page s"
wait "$up" || { tail -20 "$root/root/make-up.log" >&2; exit 1; }
ready=$(($(date +%s) - start))
chroot "$root" "${env_fresh[@]}" /bin/bash -c '
cd /root/torus
export TORUS_URL=http://127.0.0.1:8000
export TORUS_TOKEN=$(python3 -c "import json;print(json.load(open(\".var/demo.json\"))[\"tenants\"][0][\"users\"][2][\"token\"])")
printf "%s\n" "name: hello" "command: [\"bash\", \"-c\", \"echo hello from rank \$RANK of \$WORLD_SIZE\"]" \
  "resources: {nodes: 2, tasks_per_node: 2, gpus_per_node: 1}" > /root/hello.yaml
JOB=$(.venv/bin/torus submit /root/hello.yaml --project vision --wait --quiet)
.venv/bin/torus logs "$JOB"'
job=$(($(date +%s) - start))
echo "first_page: make up ended after $ready s; the first job had ended after $job s"
mkdir -p "$repo/bench/results"
out=$repo/bench/results/first_page-$(date -u +%Y%m%dT%H%M%SZ).json
printf '{"benchmark": "first_page", "commit": "%s", "sign_in_page_s": %d, "make_up_s": %d, "first_job_ended_s": %d, "target_s": 360}\n' \
  "$(git -C "$repo" rev-parse --short HEAD)" "$page" "$ready" "$job" >"$out"
echo "first_page: $out"
