#!/usr/bin/env bash
# Quick start on a fresh Debian or Ubuntu machine, from a clone of redlock:
#   1. checks for a Rust toolchain new enough to build redlock (it cannot install one for you);
#   2. installs what is missing of redis-server, openssl (the tests use it) and a C compiler
#      (the TLS crate builds C code), with `apt-get update` first, through sudo unless root;
#   3. starts a throwaway Redis on 127.0.0.1:6379 unless one answers there already: no
#      persistence, its files in a temporary directory (nothing lands in the clone);
#   4. builds redlock and takes a lock while a command runs, which shows `redlock status`.
# Running it again reuses the Redis it started. It says how to stop that Redis at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

MIN_RUST=1.88
PORT=${PORT:-6379} # PORT=6380 scripts/quickstart.sh when 6379 is taken by something else
RUSTUP='curl --proto '\''=https'\'' --tlsv1.2 -sSf https://sh.rustup.rs | sh'

say() { echo "quickstart: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# 1. Rust. rustup puts cargo in ~/.cargo/bin, which a shell opened before the install lacks.
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
  PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
  die "cargo not found. redlock needs Rust $MIN_RUST or newer; install it with rustup:
    $RUSTUP
then open a new shell (or run: . \"\$HOME/.cargo/env\") and run $0 again."
fi
have=$(cargo --version | awk '{ print $2 }')
IFS=. read -r have_major have_minor _ <<<"$have"
IFS=. read -r min_major min_minor <<<"$MIN_RUST"
if ((have_major < min_major || (have_major == min_major && have_minor < min_minor))); then
  die "cargo $have ($(command -v cargo)) is too old: redlock needs Rust $MIN_RUST or newer
(Debian's and Ubuntu's own cargo packages are older). Install a current toolchain with rustup:
    $RUSTUP
and make sure ~/.cargo/bin comes first on PATH (or run: rustup update)."
fi

# 2. Packages, only those missing.
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v openssl >/dev/null || need+=(openssl)
command -v cc >/dev/null || need+=(gcc libc6-dev)
if ((${#need[@]})); then
  command -v apt-get >/dev/null || die "please install ${need[*]} (no apt-get here)"
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "installing ${need[*]} needs root: run this as root, or install sudo"
    sudo=(sudo)
  fi
  say "installing ${need[*]}"
  installed_redis=
  [[ " ${need[*]} " == *" redis-server "* ]] && installed_redis=1
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 3. A Redis to talk to. (Installing redis-server starts the system's own on 6379 where systemd
# runs; then that one answers here and is used.)
started=
answer=$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>&1 || true)
if [[ $answer == PONG ]]; then
  say "using the Redis that answers on 127.0.0.1:$PORT"
elif [[ $answer != *"Connection refused"* ]]; then
  die "something other than a password-free Redis answers on 127.0.0.1:$PORT (redis-cli ping: $answer);
run with another port, e.g.: PORT=6380 $0"
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/redlock-quickstart.XXXXXX")
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
  for _ in $(seq 50); do
    redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null | grep -q PONG ||
    die "the Redis started on 127.0.0.1:$PORT does not answer; its log: $dir/redis.log"
  started=$dir
  say "started a throwaway Redis on 127.0.0.1:$PORT (no persistence; files in $dir)"
fi

# 4. Build, and hold a lock while a command runs.
cargo build --release --locked
bin="${CARGO_TARGET_DIR:-target}/release/redlock"
url="redis://127.0.0.1:$PORT"
"$bin" --url "$url" exec demo --note "quick start demo" -- sh -c '"$0" status; echo "I hold $REDLOCK_KEY with fence $REDLOCK_FENCE"' "$bin"

echo
echo "redlock works: $bin"
echo "Put it on your PATH to try the README's examples:  export PATH=\"$(dirname "$bin"):\$PATH\""
echo "(or install it for cron and systemd too:  sudo install -m 755 $bin /usr/bin/)"
if [ "$PORT" != 6379 ]; then
  echo "and point redlock at this Redis:  export REDLOCK_URL=$url"
fi
if [ -n "$started" ]; then
  echo "The Redis on 127.0.0.1:$PORT keeps running for you to try redlock; stop it with:"
  echo "    redis-cli -p $PORT shutdown nosave && rm -r $started"
elif [ -n "${installed_redis:-}" ]; then
  echo "The redis-server package installed above runs as the system's Redis service on"
  echo "127.0.0.1:$PORT (it keeps its data in /var/lib/redis and starts at boot). To stop it:"
  echo "    sudo systemctl disable --now redis-server"
else
  echo "The Redis on 127.0.0.1:$PORT was already running; this script leaves it alone."
fi
