# shellcheck shell=bash
# Shared helpers for platform/services/{up,down,status} and components/<name>.
# Source it; do not execute it. Every path it sets is absolute.
#
# Environment (defaults set here, exported for the components):
#   TORUS_REPO_ROOT     repo root, found from this file's location (platform/services/..)
#   TORUS_VAR_DIR       runtime state root          (default: $TORUS_REPO_ROOT/.var)
#   TORUS_LOG_DIR       logs                        ($TORUS_VAR_DIR/log)
#   TORUS_RUN_DIR       pid files, locks, sockets   ($TORUS_VAR_DIR/run)
#   TORUS_WAIT_TIMEOUT  seconds `wait` waits         (default: 60)
#   TORUS_SECRETS_DIR   generated passwords, services.env ($TORUS_VAR_DIR/secrets)
#
# Functions (all messages go to stderr, prefixed "torus services: "):
#   torus_log MSG...                 one line to stderr
#   torus_die MSG...                 one line to stderr, exit 1 (86 inside $(...))
#   torus_fail_up NAME [LOGFILE]     "NAME did not come up; see LOGFILE", exit 1
#   torus_status_line NAME up|down [ADDR]
#   torus_ensure_dirs                create TORUS_VAR_DIR, log and run dirs
#   torus_ensure_account             the platform's system user and group `torus`
#   torus_secure_var                 the account, and modes of $TORUS_VAR_DIR's own entries
#   torus_reach_checkout             let torus traverse the directories above the checkout
#   torus_secret NAME                print secrets/NAME, generated once (0640 root:torus)
#   torus_services_env_set KEY VALUE set KEY in secrets/services.env (what settings read)
#   torus_apt_install PKG...         apt-get install only the missing packages
#   torus_service_dir NAME USER [quiet]  print a data dir USER can reach (see below)
#   torus_host_dir                   print /var/lib/torus/<hash of TORUS_VAR_DIR>
#   torus_installation_id            print this installation's id (.var/installation-id,
#                                    made once: a new .var is a new installation)
#   torus_claim_tree ROOT ID NEW     mark a tenants' tree as installation ID's; move one an
#                                    earlier installation left aside (see below)
#   torus_go LABEL OVERRIDE CACHE    print a Go >= 1.21 to build with (fetched into CACHE
#                                    from the Go module proxy when there is none)
#   torus_as_user USER CMD...        run CMD as USER (runuser), from cwd /
#   torus_detach CMD...              run CMD (a daemon launcher) with fds > 2 closed,
#                                    stdin /dev/null, cwd /
#   torus_wait_for SECONDS CMD...    retry CMD every 0.5 s until it succeeds; 1 on timeout
#   torus_pid_alive PID              0 if PID runs (zombies count as gone)
#   torus_pid_of PIDFILE [COMM]      print the pid if alive (and its comm starts with COMM)
#   torus_stop_pid PIDFILE [COMM] [SECONDS]  SIGTERM, wait for exit (SIGKILL after SECONDS)
#   torus_port_open PORT [HOST]      0 if something accepts TCP connections there
#   torus_lock NAME                  serialize on $TORUS_RUN_DIR/NAME.lock (fd 9); start
#                                    daemons with torus_detach (or `9>&-`) so they drop it
#   torus_component_main NAME "$@"   dispatch install|start|wait|status|stop to the
#                                    functions <subcommand>_<NAME-with-_-for-->

TORUS_SERVICES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
TORUS_REPO_ROOT=${TORUS_REPO_ROOT:-$(cd "$TORUS_SERVICES_DIR/../.." && pwd -P)}
TORUS_VAR_DIR=${TORUS_VAR_DIR:-$TORUS_REPO_ROOT/.var}
case $TORUS_VAR_DIR in
  /*) ;;
  *) TORUS_VAR_DIR=$PWD/$TORUS_VAR_DIR ;;
esac
TORUS_VAR_DIR=${TORUS_VAR_DIR%/}
TORUS_LOG_DIR=$TORUS_VAR_DIR/log
TORUS_RUN_DIR=$TORUS_VAR_DIR/run
TORUS_WAIT_TIMEOUT=${TORUS_WAIT_TIMEOUT:-60}
TORUS_SECRETS_DIR=$TORUS_VAR_DIR/secrets
export TORUS_SERVICES_DIR TORUS_REPO_ROOT TORUS_VAR_DIR TORUS_LOG_DIR TORUS_RUN_DIR TORUS_WAIT_TIMEOUT \
  TORUS_SECRETS_DIR

torus_log() {
  printf 'torus services: %s\n' "$*" >&2
}

# In a subshell ($(...)) it exits 86 so the ERR trap knows the line was printed.
torus_die() {
  torus_log "$@"
  ((BASH_SUBSHELL == 0)) || exit 86
  exit 1
}

torus_fail_up() {
  local name=$1 log=${2:-}
  if [[ -n $log ]]; then
    torus_die "$name did not come up; see $log"
  fi
  torus_die "$name did not come up"
}

torus_status_line() {
  local name=$1 state=$2 addr=${3:-}
  if [[ -n $addr ]]; then
    printf '%-14s %-5s %s\n' "$name" "$state" "$addr"
  else
    printf '%-14s %s\n' "$name" "$state"
  fi
}

torus_ensure_dirs() {
  mkdir -p "$TORUS_VAR_DIR" "$TORUS_LOG_DIR" "$TORUS_RUN_DIR"
}

# The platform's service account: the portal's processes that need no root run as it.
torus_ensure_account() {
  getent group torus >/dev/null || groupadd --system torus
  id -u torus >/dev/null 2>&1 ||
    useradd --system --gid torus --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin torus
}

# torus_secure_var : the account, then $TORUS_VAR_DIR's own entries closed to other users
# (jobs run as their submitters' uids): .var traversable but not listable, secrets/ and
# secret-key readable by group torus, logs by nobody else, demo tokens by root alone.
torus_secure_var() {
  torus_ensure_account
  torus_ensure_dirs
  chmod 711 "$TORUS_VAR_DIR" "$TORUS_RUN_DIR"
  install -d -m 750 -o root -g torus "$TORUS_SECRETS_DIR"
  chown root:torus "$TORUS_LOG_DIR"
  chmod 750 "$TORUS_LOG_DIR"
  find "$TORUS_LOG_DIR" "$TORUS_RUN_DIR" -maxdepth 1 -type f -perm /o=rw -exec chmod o-rw {} +
  if [[ -f $TORUS_VAR_DIR/secret-key ]]; then
    chown root:torus "$TORUS_VAR_DIR/secret-key"
    chmod 640 "$TORUS_VAR_DIR/secret-key"
  fi
  [[ ! -f $TORUS_VAR_DIR/demo.json ]] || chmod 600 "$TORUS_VAR_DIR/demo.json"
  torus_reach_checkout
}

# torus_reach_checkout : the platform account can reach the code it runs (the portal's web,
# beat and shipper run as torus): each directory above the checkout that torus cannot
# traverse (a clone under /root, mode 700) gets an ACL entry letting torus through, and
# nothing more (no listing, no reading).
torus_reach_checkout() {
  local dir=
  local -a parts
  IFS=/ read -r -a parts <<<"${TORUS_REPO_ROOT#/}"
  for part in "" "${parts[@]}"; do
    dir=${dir%/}/$part
    setpriv --reuid=torus --regid=torus --clear-groups -- test -x "$dir" 2>/dev/null && continue
    command -v setfacl >/dev/null || torus_apt_install acl
    setfacl -m u:torus:x "$dir"
    torus_log "let the platform account torus traverse $dir (ACL u:torus:x)"
  done
}

# torus_secret NAME : prints secrets/NAME, made once: 32 random hex digits (URL-safe).
torus_secret() {
  local file=$TORUS_SECRETS_DIR/$1 value
  torus_secure_var
  if [[ ! -s $file ]]; then
    value=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    (umask 077 && printf '%s\n' "$value" >"$file.new")
    chown root:torus "$file.new"
    chmod 640 "$file.new"
    mv -f "$file.new" "$file"
  fi
  head -n 1 "$file"
}

# torus_services_env_set KEY VALUE : KEY=VALUE in secrets/services.env, which
# config/settings.py reads for what the environment does not set. Replaced atomically.
torus_services_env_set() {
  local key=$1 value=$2 file=$TORUS_SECRETS_DIR/services.env
  torus_secure_var
  (
    umask 077
    flock -w 60 8 || torus_die "could not lock $file"
    {
      printf '# Written by platform/services (torus_services_env_set); read by config/env.py.\n'
      [[ ! -f $file ]] || grep -v -e '^#' -e "^$key=" "$file" || true
      printf '%s=%s\n' "$key" "$value"
    } >"$file.new"
    chown root:torus "$file.new"
    chmod 640 "$file.new"
    if cmp -s "$file.new" "$file"; then rm -f "$file.new"; else mv -f "$file.new" "$file"; fi
  ) 8>"$TORUS_SECRETS_DIR/.services.env.lock"
}

# torus_apt_install PKG... : installs only what dpkg does not list as installed;
# `apt-get update` runs only when something is missing.
torus_apt_install() {
  local pkg missing=()
  for pkg in "$@"; do
    if [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null) != installed ]]; then
      missing+=("$pkg")
    fi
  done
  ((${#missing[@]})) || return 0
  torus_log "installing ${missing[*]} (apt-get)"
  local apt=(apt-get -q -y -o DPkg::Lock::Timeout=300)
  # one `apt-get update` an hour: a fresh machine's set-up installs for several components in
  # turn; lists too old for a package (a 404) are refreshed and the install tried once more
  local stamp=/var/cache/apt/torus-updated
  if [[ -z $(find "$stamp" -mmin -60 2>/dev/null) ]]; then
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" update >&2 && touch "$stamp"
  fi
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2 || {
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" update >&2 && touch "$stamp"
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2
  }
}

# Without a Go >= 1.21 here, the toolchain itself comes from the Go module proxy (the
# golang.org/toolchain module, as GOTOOLCHAIN=auto fetches it), checked against these hashes.
TORUS_GO_BOOTSTRAP=go1.25.14
declare -A TORUS_GO_SHA256=(
  [amd64]=1bb543a7745d4c6e045a1bfdb4c4d5a0b05b71ee8b8ff72c0a351598b26991a4
  [arm64]=eee0803776a2a3d42f0620d7b0156277350debb5d39c99a9b61c8b12108fd92c
)

torus_go_usable() { # a Go that can switch toolchains (1.21+)
  local version
  [[ -x $1 ]] || return 1
  version=$("$1" env GOVERSION 2>/dev/null) || return 1
  [[ $version =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= 21))
}

# torus_go_bootstrap LABEL CACHE : fetch $TORUS_GO_BOOTSTRAP into CACHE once; print its go.
torus_go_bootstrap() {
  local label=$1 cache=$2 arch dir url zip
  case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) torus_die "$label: no Go toolchain for $(uname -m); install Go >= 1.21 and name it" ;;
  esac
  dir=$cache/$TORUS_GO_BOOTSTRAP.linux-$arch
  if [[ ! -x $dir/bin/go ]]; then
    command -v unzip >/dev/null || torus_apt_install unzip
    url=${GOPROXY:-https://proxy.golang.org}
    url=${url%%[,|]*}/golang.org/toolchain/@v/v0.0.1-$TORUS_GO_BOOTSTRAP.linux-$arch.zip
    zip=$dir.zip
    mkdir -p "${dir%/*}"
    torus_log "$label: no Go >= 1.21 here; fetching $TORUS_GO_BOOTSTRAP from the Go module proxy"
    curl -fsS --retry 3 -o "$zip" "$url" || torus_die "$label: could not fetch $url"
    if [[ $(sha256sum "$zip" | cut -d' ' -f1) != "${TORUS_GO_SHA256[$arch]}" ]]; then
      rm -f "$zip"
      torus_die "$label: $url does not have the expected SHA-256"
    fi
    rm -rf "$dir.unzip" "$dir"
    unzip -q "$zip" -d "$dir.unzip"
    mv "$dir.unzip/golang.org/toolchain@v0.0.1-$TORUS_GO_BOOTSTRAP.linux-$arch" "$dir"
    rm -rf "$dir.unzip" "$zip"
  fi
  printf '%s\n' "$dir/bin/go"
}

# torus_go LABEL OVERRIDE CACHE : the go to build with (it fetches the toolchain a module
# asks for, GOTOOLCHAIN=auto): OVERRIDE if set (a path, or `bootstrap` to force the
# download), else one on PATH or in /usr/local/go if 1.21+, else the bootstrapped one.
torus_go() {
  local label=$1 override=$2 cache=$3 go
  case $override in
    bootstrap) torus_go_bootstrap "$label" "$cache"; return ;;
    '') ;;
    *) torus_go_usable "$override" || torus_die "$label: $override is not a Go >= 1.21"
       printf '%s\n' "$override"; return ;;
  esac
  for go in "$(command -v go || true)" /usr/local/go/bin/go; do
    if [[ -n $go ]] && torus_go_usable "$go"; then
      printf '%s\n' "$go"
      return 0
    fi
  done
  torus_go_bootstrap "$label" "$cache"
}

torus_host_dir() {
  local hash
  hash=$(printf '%s' "$TORUS_VAR_DIR" | sha256sum | cut -c1-12)
  printf '/var/lib/torus/%s\n' "$hash"
}

torus_installation_id() {
  local file=$TORUS_VAR_DIR/installation-id
  if [[ ! -s $file ]]; then
    (umask 022 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$file.new" && echo >>"$file.new")
    mv -f "$file.new" "$file"
  fi
  cat "$file"
}

# The data dir is derived from the .var's path, so a new .var at a path used before (a
# checkout cloned again in place, a CI machine used again) finds the earlier installation's
# tenant trees there, with other groups: its projects' jobs would be held ("an older
# project's directory") for ever. A tree of another installation (another id in
# ROOT.torus-installation; or no id, not empty, and NEW=1, an installation whose helper never
# ran) is moved aside whole to ROOT.earlier-<UTC time> and logged; nothing is deleted, the
# operator purges it. An unmarked tree of an installation that ran before ids were kept stays.
torus_claim_tree() {
  local root=$1 id=$2 new=$3 mark="$1.torus-installation" seen="" aside
  mkdir -p "$(dirname "$root")"
  [[ ! -f $mark ]] || seen=$(<"$mark")
  if [[ -d $root ]] && { [[ -n $seen && $seen != "$id" ]] ||
    { [[ -z $seen && $new == 1 ]] && [[ -n $(ls -A "$root") ]]; }; }; then
    aside="$root.earlier-$(date -u +%Y%m%dT%H%M%SZ)"
    mv "$root" "$aside"
    torus_log "$root held an earlier installation's tree (${seen:-no id}); moved to $aside"
  fi
  printf '%s\n' "$id" >"$mark"
}

torus_as_user() {
  local user=$1
  shift
  (cd / && runuser -u "$user" -- "$@")
}

# torus_detach CMD... : run CMD from cwd / with stdin from /dev/null and every fd above 2
# closed, so a daemon it starts holds no pipe or lock of its caller (the lock fd 9, a
# CI harness's pipes). Redirect its stdout/stderr to a log yourself.
torus_detach() {
  (
    cd /
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then
        eval "exec $fd>&-" 2>/dev/null || true
      fi
    done
    exec "$@" </dev/null
  )
}

# torus_service_dir NAME USER [quiet] : prints the data dir for NAME, owned by USER.
# If USER can traverse TORUS_VAR_DIR it is $TORUS_VAR_DIR/NAME. Otherwise (a clone
# under a mode-700 home, say) it is /var/lib/torus/<hash of TORUS_VAR_DIR>/NAME and
# $TORUS_VAR_DIR/NAME becomes a symlink to it. NAME may contain slashes (run/postgres).
torus_service_dir() {
  local name=$1 user=$2 quiet=${3:-} link=$TORUS_VAR_DIR/$1 target host
  mkdir -p "$TORUS_VAR_DIR" "$(dirname "$link")"
  if [[ -L $link ]]; then
    target=$(readlink -f "$link" || true)
    if [[ -n $target ]] && mkdir -p "$target" && torus_as_user "$user" test -x "$target"; then
      chown "$user:" "$target"
      printf '%s\n' "$target"
      return 0
    fi
    rm -f "$link"
  fi
  if torus_as_user "$user" test -x "$TORUS_VAR_DIR"; then
    mkdir -p "$link"
    chown "$user:" "$link"
    printf '%s\n' "$link"
    return 0
  fi
  host=$(torus_host_dir)
  target=$host/$name
  if [[ -d $link ]]; then
    rmdir "$link" 2>/dev/null ||
      torus_die "$link holds data but user $user cannot reach $TORUS_VAR_DIR; move it to $target and replace it by a symlink"
  fi
  mkdir -p "$target"
  chmod 755 /var/lib/torus "$host"
  printf '%s\n' "$TORUS_VAR_DIR" >"$host/origin"
  chown "$user:" "$target"
  ln -sfn "$target" "$link"
  [[ -n $quiet ]] || torus_log "note: user $user cannot traverse $TORUS_VAR_DIR; $name data lives in $target ($link links to it)"
  printf '%s\n' "$target"
}

torus_wait_for() {
  local timeout=$1 deadline
  shift
  deadline=$((SECONDS + timeout))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

# torus_pid_alive PID : 0 if PID exists and is not a zombie (pid 1 here may reap late).
torus_pid_alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

torus_pid_of() {
  local pidfile=$1 comm=${2:-} pid actual
  [[ -r $pidfile ]] || return 1
  read -r pid <"$pidfile" || [[ -n ${pid:-} ]] || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  torus_pid_alive "$pid" || return 1
  if [[ -n $comm ]]; then
    actual=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $actual == "$comm"* ]] || return 1
  fi
  printf '%s\n' "$pid"
}

torus_stop_pid() {
  local pidfile=$1 comm=${2:-} timeout=${3:-$TORUS_WAIT_TIMEOUT} pid
  pid=$(torus_pid_of "$pidfile" "$comm") || { rm -f "$pidfile"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  if ! torus_wait_for "$timeout" eval "! torus_pid_alive $pid"; then
    torus_log "pid $pid ($pidfile) did not exit after ${timeout}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    torus_wait_for 10 eval "! torus_pid_alive $pid" || torus_die "pid $pid did not exit"
  fi
  rm -f "$pidfile"
}

torus_port_open() {
  local port=$1 host=${2:-127.0.0.1}
  # shellcheck disable=SC2016
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
}

torus_lock() {
  torus_ensure_dirs
  exec 9>"$TORUS_RUN_DIR/$1.lock"
  chmod go-rw "$TORUS_RUN_DIR/$1.lock"   # a job could hold an open lock file's flock
  flock -w 300 9 || torus_die "$1: could not get $TORUS_RUN_DIR/$1.lock within 300s"
}

torus_component_main() {
  local name=$1 sub=${2:-} fn
  fn=${sub}_${name//-/_}
  case $sub in
    install | start | wait | status | stop) ;;
    env) declare -F "$fn" >/dev/null || torus_die "components/$name has no env step" ;;
    *) torus_die "usage: components/$name install|start|wait|status|stop" ;;
  esac
  "$fn"
}

# An unexpected failure under `set -e` still leaves one line naming the script.
# Silent for scripts that run with `set +e` and in subshells.
torus_on_err() {
  local rc=$? cmd=$1 line=$2
  [[ $- == *e* ]] || return 0
  ((BASH_SUBSHELL == 0)) || return 0
  ((rc != 86)) || exit 1
  torus_log "$(basename "$0") ${TORUS_SUBCOMMAND:-}: failed (exit $rc) at line $line: $cmd"
}
TORUS_SUBCOMMAND=${1:-}
set -E
trap 'torus_on_err "$BASH_COMMAND" "$LINENO"' ERR

torus_available_components() {
  local f out=()
  for f in "$TORUS_SERVICES_DIR"/components/*; do
    [[ -f $f && -x $f ]] && out+=("${f##*/}")
  done
  printf '%s\n' "${out[*]}"
}

# torus_components NAME... : sets the array TORUS_COMPONENTS to the arguments, or else
# to ${TORUS_SERVICES:-firewall helper ldap postgres redis elasticsearch s3 slurm kubernetes}; dies on a name without a script.
torus_components() {
  local names=("$@") name available
  if ((${#names[@]} == 0)); then
    read -r -a names <<<"${TORUS_SERVICES:-firewall helper ldap postgres redis elasticsearch s3 slurm kubernetes}"
  fi
  for name in "${names[@]}"; do
    if [[ ! $name =~ ^[a-z0-9][a-z0-9_-]*$ || ! -x $TORUS_SERVICES_DIR/components/$name ]]; then
      available=$(torus_available_components)
      torus_die "unknown component '$name' (available: $available)"
    fi
  done
  # shellcheck disable=SC2034  # used by the scripts that source this file
  TORUS_COMPONENTS=("${names[@]}")
}
