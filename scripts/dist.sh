#!/usr/bin/env bash
# Builds redlock's release artifacts into dist/ (ignored by git), one static binary per target:
#   dist/redlock-VERSION-x86_64-unknown-linux-musl.tar.gz   binary, man pages, completions,
#   dist/redlock-VERSION-aarch64-unknown-linux-musl.tar.gz  README, CHANGELOG, licences
#   dist/redlock_VERSION-1_amd64.deb                        each binary as a Debian package
#   dist/redlock_VERSION-1_arm64.deb
#   dist/SHA256SUMS                                         of all four
# The binaries are musl, static and stripped: no libc needed at run time. x86-64's is
# static-pie; aarch64's is a plain static executable (Rust's aarch64 musl target builds no
# static-pie). aarch64 is cross-compiled: ring (rustls's cryptography) compiles its C with
# Debian's aarch64-linux-gnu-gcc (ring's C needs only a few libc headers: stdint, string and the
# like, the same on glibc and musl), and rust-lld, which comes with the Rust toolchain, links
# (Rust's target would run the host's cc). aarch64-linux-gnu-gcc links a working binary too;
# rust-lld keeps the link to the Rust toolchain and Rust's own musl (crt objects, libc.a),
# whatever the cross compiler's glibc offers.
# Missing tools are installed first: the Rust targets (rustup), and musl-tools and the aarch64
# cross compiler (apt-get, as root).
#
#   scripts/dist.sh           build
#   scripts/dist.sh --check   build, then check what was built: each binary is static, stripped
#                             and of its architecture (file); lintian passes; each package,
#                             unpacked with dpkg -x into a scratch root, and each tarball,
#                             unpacked, run --version and an exec against a scratch
#                             redis-server; man -l renders each page; chosen integration tests
#                             pass against each static binary, the aarch64 one under qemu-user
#                             (see `aarch64_tests` below). Needs root, redis-server, openssl,
#                             lintian, man-db, qemu-user-static (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

check=
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/dist.sh [--check]" >&2; exit 2 ;;
esac

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[[ -n $version ]] || { echo "dist: no version in Cargo.toml" >&2; exit 1; }
deb_version=$version-1
target_dir=${CARGO_TARGET_DIR:-target}
dist=dist
# Reproducible archives: every date is the last commit's (or now, outside git).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
# The cross build of aarch64 (see the top); a caller's own choice wins.
export CC_aarch64_unknown_linux_musl=${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER:-rust-lld}

# Per target: the Debian architecture, the name people know it by, and what `file` says.
targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
declare -A deb_arch=([x86_64-unknown-linux-musl]=amd64 [aarch64-unknown-linux-musl]=arm64)
declare -A arch_name=([x86_64-unknown-linux-musl]=x86-64 [aarch64-unknown-linux-musl]=arm64)
declare -A file_arch=([x86_64-unknown-linux-musl]=x86-64 [aarch64-unknown-linux-musl]="ARM aarch64")

say() { echo "dist: $*" >&2; }

apt_install() {
  say "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- the static binaries ------------------------------------------------------------------
need=()
# ring compiles C and assembly: for x86-64 with musl's headers and libc (musl-gcc), for aarch64
# with the cross compiler and its (glibc's) headers.
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v "$CC_aarch64_unknown_linux_musl" >/dev/null || need+=(gcc-aarch64-linux-gnu)
[[ -e /usr/aarch64-linux-gnu/include/stdint.h ]] || need+=(libc6-dev-arm64-cross)
command -v file >/dev/null || need+=(file)
if ((${#need[@]})); then apt_install "${need[@]}"; fi
installed_targets=$(rustup target list --installed)
for target in "${targets[@]}"; do
  if ! grep -qx "$target" <<<"$installed_targets"; then
    say "adding the Rust target $target"
    rustup target add "$target"
  fi
done

declare -A bin
for target in "${targets[@]}"; do
  started=$SECONDS
  cargo build --release --locked --target "$target"
  bin[$target]=$target_dir/$target/release/redlock
  # `file`, not ldd: ldd cannot read another architecture's binary.
  file_says=$(file -b "${bin[$target]}")
  case $file_says in
    *", ${file_arch[$target]}, "*", stati"*" linked, "*"stripped") ;;
    *) say "${bin[$target]} is not a static, stripped ${arch_name[$target]} binary: $file_says"
       exit 1 ;;
  esac
  case $file_says in
    *", not stripped") say "${bin[$target]} is not stripped: $file_says"; exit 1 ;;
  esac
  say "built ${bin[$target]} in $((SECONDS - started)) s: $file_says"
done

rm -rf "$dist"
mkdir -p "$dist"

# --- the tarballs and the Debian packages -------------------------------------------------
# package TARGET: writes $dist/redlock-$version-TARGET.tar.gz and its .deb.
package() {
  local target=$1 binary=${bin[$1]} arch=${deb_arch[$1]} human=${arch_name[$1]}
  local name=redlock-$version-$target
  local stage=$dist/stage/$name
  mkdir -p "$stage/man" "$stage/completions"
  install -m 0755 "$binary" "$stage/redlock"
  install -m 0644 man/*.1 "$stage/man/"
  install -m 0644 completions/* "$stage/completions/"
  install -m 0644 README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$stage/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C "$dist/stage" -cf - "$name" | gzip -9n >"$dist/$name.tar.gz"

  local root=$dist/deb/$arch/redlock
  local doc=$root/usr/share/doc/redlock
  mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" "$doc" \
    "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/lintian/overrides"
  install -m 0755 "$binary" "$root/usr/bin/redlock"
  local page
  for page in man/*.1; do
    gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
  done
  install -m 0644 completions/redlock.bash "$root/usr/share/bash-completion/completions/redlock"
  install -m 0644 completions/_redlock "$root/usr/share/zsh/vendor-completions/_redlock"
  install -m 0644 completions/redlock.fish "$root/usr/share/fish/vendor_completions.d/redlock.fish"
  gzip -9n <README.md >"$doc/README.md.gz"
  gzip -9n <CHANGELOG.md >"$doc/changelog.gz"
  local date_rfc
  date_rfc=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
  gzip -9n >"$doc/changelog.Debian.gz" <<EOF
redlock ($deb_version) unstable; urgency=medium

  * redlock $version, built by scripts/dist.sh from the static binary
    ($target).
  * The changes are in /usr/share/doc/redlock/changelog.gz.

 -- redlock developers <redlock@users.noreply.github.com>  $date_rfc
EOF
  {
    cat <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: redlock
Upstream-Contact: redlock developers <redlock@users.noreply.github.com>
Comment: The binary is linked statically: it also holds the Rust crates listed in the
 source's Cargo.lock (each under MIT, Apache-2.0, ISC, BSD-3-Clause or a compatible
 licence) and musl libc (MIT).

Files: *
Copyright: 2026 The redlock developers
License: MIT or Apache-2.0

License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.

License: MIT
EOF
    sed -e 's/^$/./' -e 's/^/ /' LICENSE-MIT
  } >"$doc/copyright"
  chmod 0644 "$doc"/*
  # A static binary is the point of this package (it runs on any Linux of its architecture, and
  # in images without a libc); lintian flags every static binary as a likely mistake.
  {
    cat <<EOF
# Static on purpose: one binary for every $human Linux, built from the musl target.
redlock: statically-linked-binary [usr/bin/redlock]
EOF
    if [[ $(file -b "$binary") == *static-pie* ]]; then
      cat <<'EOF'
# A static-pie executable has no interpreter and no libc to need: lintian reads it as a shared
# library without prerequisites.
redlock: shared-library-lacks-prerequisites [usr/bin/redlock]
EOF
    fi
  } >"$root/usr/share/lintian/overrides/redlock"
  chmod 0644 "$root/usr/share/lintian/overrides/redlock"
  local installed_kib
  installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  cat >"$root/DEBIAN/control" <<EOF
Package: redlock
Version: $deb_version
Architecture: $arch
Maintainer: redlock developers <redlock@users.noreply.github.com>
Installed-Size: $installed_kib
Suggests: redis-server, bash-completion
Section: utils
Priority: optional
Description: distributed lock for shell scripts, cron jobs and CI, on Redis
 redlock gives shell scripts, cron jobs and CI pipelines a mutual exclusion
 lock that works across machines, backed by Redis: run a command under a lock
 (redlock exec), queue for it first come first served, take and release it
 by hand, and see who holds what (redlock status). Locks are released with
 the holder's token only and hand out fencing tokens.
 .
 This package holds one statically linked binary; it needs a Redis server
 (local or remote) at run time.
EOF
  (cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
  find "$root" -type d -exec chmod 0755 {} +
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group -Zxz --build "$root" "$dist/redlock_${deb_version}_$arch.deb" \
    >/dev/null
}

for target in "${targets[@]}"; do
  package "$target"
done
rm -rf "$dist/stage" "$dist/deb"
(cd "$dist" && sha256sum ./*.tar.gz ./*.deb | sed 's|  \./|  |' >SHA256SUMS)
say "wrote $(cd "$dist" && echo *.tar.gz *.deb SHA256SUMS)"

[[ -n $check ]] || exit 0

# --- checks -------------------------------------------------------------------------------
need=()
command -v lintian >/dev/null || need+=(lintian)
command -v man >/dev/null || need+=(man-db)
command -v redis-server >/dev/null || need+=(redis-server)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
if ((${#need[@]})); then apt_install "${need[@]}"; fi
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
scratch=$(mktemp -d)
redis_pid=
cleanup() {
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
# One exec against a scratch redis-server on a Unix socket (no port to collide with).
redis-server --port 0 --unixsocket "$scratch/redis.sock" --save '' --appendonly no \
  --daemonize no >"$scratch/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
  [[ -S $scratch/redis.sock ]] && break
  sleep 0.05
done

# check_package TARGET [EMULATOR]: lintian, the man pages, and --version and one exec of the
# binary from the .deb (unpacked) and from the tarball, run by EMULATOR when one is given.
# Prints the binary from the .deb.
check_package() {
  local target=$1 run=("${@:2}")
  local deb=$dist/redlock_${deb_version}_${deb_arch[$target]}.deb
  local name=redlock-$version-$target
  local into=$scratch/$target
  # lintian refuses to run as root unless told; errors fail the check, warnings are shown.
  lintian --allow-root --fail-on error --tag-display-limit 0 "$deb" >&2
  mkdir -p "$into/tar"
  dpkg -x "$deb" "$into/root"
  local page
  for page in "$into"/root/usr/share/man/man1/*.1.gz; do
    if ! MANWIDTH=80 man -l "$page" >/dev/null 2>"$scratch/man.err" || [[ -s $scratch/man.err ]]; then
      say "man -l $(basename "$page") failed:"
      cat "$scratch/man.err" >&2
      exit 1
    fi
  done
  tar -xzf "$dist/$name.tar.gz" -C "$into/tar"
  local binary first out
  for binary in "$into/root/usr/bin/redlock" "$into/tar/$name/redlock"; do
    first=$("${run[@]}" "$binary" --version | head -n 1)
    [[ $first == "redlock $version ("*"$target)" ]] || { say "$binary: --version says: $first"; exit 1; }
    out=$("${run[@]}" "$binary" -u "unix://$scratch/redis.sock" exec dist-check -- \
      sh -c 'echo "fence $REDLOCK_FENCE"')
    [[ $out == "fence "* ]] || { say "$binary: exec said: $out"; exit 1; }
    "${run[@]}" "$binary" -u "unix://$scratch/redis.sock" status dist-check >/dev/null || [[ $? -eq 1 ]]
    say "ran ${run[*]:+${run[*]} }$binary: $first; $out"
  done
  realpath "$into/root/usr/bin/redlock"
}

# Against the static x86-64 binary, the tests that exercise: TLS (rustls); the supervisor
# (exec); the keeper (`acquire --while-pid`: a re-exec of /proc/self/exe, pidfds,
# announcements); and the subreaper (PR_SET_CHILD_SUBREAPER: --max-runtime and --preemptible
# stop what the command left running).
installed=$(check_package x86_64-unknown-linux-musl)
REDLOCK_TEST_BIN=$installed REDLOCK_REQUIRE_REDIS=1 \
  cargo test --locked --quiet --test it -- topology::tls:: exec::run:: safety::while_pid:: \
    safety::announcements:: safety::max_runtime:: safety::preempt:: \
    --skip safety::while_pid::attack:: 2>&1 |
  grep -E '^test result|FAILED|panicked' >&2
say "checked x86_64-unknown-linux-musl"

# The aarch64 binary runs under qemu-user on this machine, against the same native redis-server.
# The tests it runs: TLS (ring's aarch64 C and assembly); exec (a real command, its exit status,
# forwarded signals, a SIGKILLed holder's command stopped and its lock freed); the queue (waiters
# served in arrival order, a dead holder's lock passed on); the keeper (`--while-pid`).
aarch64_tests=(topology::tls:: exec::run:: exec::signals:: waiting::queue:: safety::while_pid::)
# Left out: what qemu-user does otherwise than an arm64 kernel (each seen in `qemu-aarch64-static
# -strace`), and one count that the emulator's slowness upsets. --max-runtime's and preemption's
# tests are not run at all: they stop what the command left behind, which needs
# PR_SET_CHILD_SUBREAPER, and qemu 7.2's prctl answers EINVAL to it.
aarch64_skips=(
  # The attack tests of the keeper (minutes), as for x86-64.
  safety::while_pid::attack::
  # exec's spawn learns of a failed execve through memory it shares with the child (clone with
  # CLONE_VM | CLONE_VFORK); qemu-user runs that clone as a fork: the exit status is 127 (126
  # expected for a file that cannot be executed) and the one line saying why is missing.
  exec::run::a_missing_command_gives_127_and_releases_the_lock
  exec::run::a_command_that_cannot_be_executed_gives_126_and_releases_the_lock
  # qemu-user handles the signals that kill by default itself, also when the caller left them
  # ignored: the command starts with SIGHUP at its default instead of ignored.
  exec::signals::signals_ignored_by_the_caller_stay_ignored
  # status finds the keeper by its /proc/PID/cmdline, which under qemu-user is the emulator's.
  safety::while_pid::status_shows_a_keeper_waiting_for_leftover_work_as_draining
  # Counts script calls exactly, assuming its ten waiters started well within their 3 s block
  # cap; emulated, they take about that long to start, and about one run in two counts one call
  # more (natively it passes).
  waiting::queue::a_release_wakes_one_waiter_not_all
)
skips=()
for test in "${aarch64_skips[@]}"; do skips+=(--skip "$test"); done

# with_aarch64 COMMAND...: runs COMMAND where the kernel runs an aarch64 executable through
# qemu-aarch64-static, as a test starts redlock and as the keeper of `--while-pid` re-executes
# itself (/proc/self/exe): qemu-user passes an emulated execve to the kernel, which without a
# binfmt_misc entry refuses an aarch64 file (ENOEXEC). The entry lives in a user namespace of
# the command's own (binfmt_misc is per user namespace since Linux 6.7): nothing changes for the
# rest of the machine. Its uids and gids map one to one onto ours (root stays root, a test can
# still switch to nobody: root writes that map from outside). The entry's P flag passes argv[0]
# on (the keeper is known by it), F opens the emulator at once. Returns NO_BINFMT when the
# namespace or the entry cannot be made (an older kernel, a container that forbids user
# namespaces or mounts in them), and COMMAND's status otherwise. REDLOCK_DIST_NO_BINFMT=1 acts as
# if they could not, to try the fallback below.
NO_BINFMT=97
with_aarch64() {
  local go=$scratch/binfmt-go pid ours status=0
  local entry=':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:'
  entry+="$(command -v qemu-aarch64-static):PF"
  if [[ $EUID -ne 0 ]]; then
    say "the aarch64 tests need root to map every uid into their namespace"
    return "$NO_BINFMT"
  fi
  if [[ ${REDLOCK_DIST_NO_BINFMT:-} == 1 ]]; then return "$NO_BINFMT"; fi
  mkfifo "$go"
  unshare --user --mount bash -c '
    read -r _ <"$1"
    if ! mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
      ! printf %s "$2" >/proc/sys/fs/binfmt_misc/register; then
      echo "dist: cannot register qemu-aarch64-static with binfmt_misc in a user namespace (Linux 6.7 or later can)" >&2
      exit '"$NO_BINFMT"'
    fi
    shift 2
    exec "$@"' with_aarch64 "$go" "$entry" "$@" &
  pid=$!
  ours=$(readlink /proc/self/ns/user)
  # Until unshare has made the namespace (or failed: then its pid is gone and the link empty).
  while [[ $(readlink "/proc/$pid/ns/user" 2>/dev/null || true) == "$ours" ]]; do sleep 0.01; done
  if ! { echo '0 0 4294967295' >"/proc/$pid/uid_map" && echo '0 0 4294967295' >"/proc/$pid/gid_map"; } 2>/dev/null; then
    wait "$pid" || true
    rm -f "$go"
    say "cannot make a user namespace for the aarch64 tests"
    return "$NO_BINFMT"
  fi
  echo go >"$go"
  wait "$pid" || status=$?
  rm -f "$go"
  return "$status"
}

started=$SECONDS
installed=$(check_package aarch64-unknown-linux-musl qemu-aarch64-static)
# One test at a time: an emulated `redlock exec -n` takes about 0.1 s of CPU (a few ms
# natively), and a test that counts what fits in a time window (the renewal test counts the
# competitors it turns away in 3.5 s) came up short beside one that starts two hundred.
ran=0
REDLOCK_TEST_BIN=$installed REDLOCK_REQUIRE_REDIS=1 \
  with_aarch64 cargo test --locked --quiet --test it -- "${aarch64_tests[@]}" "${skips[@]}" \
    --test-threads=1 >"$scratch/aarch64.log" 2>&1 || ran=$?
grep -E '^test result|FAILED|panicked|^dist: ' "$scratch/aarch64.log" >&2 || true
# Where no binfmt_misc entry can be made, the tests start the binary through the emulator
# themselves (a wrapper that execs qemu-aarch64-static: signals sent to it reach the emulated
# redlock). Everything but --while-pid runs so: its keeper re-executes itself, which needs the
# entry. Said loudly, since the keeper then went untested on aarch64.
if ((ran == NO_BINFMT)); then
  say "WARNING: no binfmt_misc entry for qemu-aarch64-static can be made here: the aarch64 tests" \
    "run through the emulator directly, WITHOUT the --while-pid (keeper) tests"
  # Named redlock, first on the tests' PATH: their shell scripts call it by name.
  mkdir "$scratch/aarch64-wrapper"
  wrapper=$scratch/aarch64-wrapper/redlock
  printf '#!/bin/sh\nexec qemu-aarch64-static %q "$@"\n' "$installed" >"$wrapper"
  chmod +x "$wrapper"
  direct=()
  for test in "${aarch64_tests[@]}"; do
    [[ $test == safety::while_pid:: ]] || direct+=("$test")
  done
  # Its script takes a lock with --while-pid.
  skips+=(--skip exec::run::works_in_a_pid_namespace_whose_session_began_outside_it)
  ran=0
  REDLOCK_TEST_BIN=$wrapper REDLOCK_REQUIRE_REDIS=1 \
    cargo test --locked --quiet --test it -- "${direct[@]}" "${skips[@]}" --test-threads=1 \
    >"$scratch/aarch64.log" 2>&1 || ran=$?
  grep -E '^test result|FAILED|panicked' "$scratch/aarch64.log" >&2 || true
  if ((ran)); then exit "$ran"; fi
elif ((ran)); then
  exit "$ran"
fi
say "checked aarch64-unknown-linux-musl under qemu-user in $((SECONDS - started)) s"
say "checked"
