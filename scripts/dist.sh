#!/usr/bin/env bash
# Builds redlock's release artifacts into dist/ (ignored by git), from one static binary:
#   dist/redlock-VERSION-x86_64-unknown-linux-musl.tar.gz  binary, man pages, completions,
#                                                         README, CHANGELOG, licences
#   dist/redlock_VERSION-1_amd64.deb                      the same binary as a Debian package
#   dist/SHA256SUMS                                       of both
# The binary is x86_64-unknown-linux-musl: static-pie, stripped, no libc needed at run time.
# Missing tools are installed first: the Rust target (rustup) and musl-tools (apt-get, as root).
#
#   scripts/dist.sh           build
#   scripts/dist.sh --check   build, then check what was built: the binary is static; lintian
#                             passes; the package, unpacked with dpkg -x into a scratch root,
#                             and the tarball, unpacked, each run --version and an exec against
#                             a scratch redis-server; man -l renders each page; the TLS, exec,
#                             keeper and subreaper tests pass against the static binary (needs
#                             redis-server, openssl, lintian, man-db)
set -euo pipefail
cd "$(dirname "$0")/.."

check=
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/dist.sh [--check]" >&2; exit 2 ;;
esac

target=x86_64-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[[ -n $version ]] || { echo "dist: no version in Cargo.toml" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-target}
dist=dist
# Reproducible archives: every date is the last commit's (or now, outside git).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

say() { echo "dist: $*" >&2; }

apt_install() {
  say "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- the static binary --------------------------------------------------------------------
if ! rustup target list --installed | grep -qx "$target"; then
  say "adding the Rust target $target"
  rustup target add "$target"
fi
# ring (rustls's cryptography) compiles C and assembly: with musl's headers and libc.
command -v musl-gcc >/dev/null || apt_install musl-tools
cargo build --release --locked --target "$target"
bin=$target_dir/$target/release/redlock
file_says=$(file -b "$bin" 2>/dev/null || true)
if ! ldd "$bin" 2>&1 | grep -q 'statically linked'; then
  say "$bin is not statically linked: $(ldd "$bin" 2>&1 | head -n 3)"
  exit 1
fi
say "built $bin: ${file_says:-static}"

rm -rf "$dist"
mkdir -p "$dist"

# --- the tarball --------------------------------------------------------------------------
name=redlock-$version-$target
stage=$dist/stage/$name
mkdir -p "$stage/man" "$stage/completions"
install -m 0755 "$bin" "$stage/redlock"
install -m 0644 man/*.1 "$stage/man/"
install -m 0644 completions/* "$stage/completions/"
install -m 0644 README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$stage/"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
  -C "$dist/stage" -cf - "$name" | gzip -9n >"$dist/$name.tar.gz"

# --- the Debian package -------------------------------------------------------------------
deb_version=$version-1
root=$dist/deb/redlock
doc=$root/usr/share/doc/redlock
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" "$doc" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/lintian/overrides"
install -m 0755 "$bin" "$root/usr/bin/redlock"
for page in man/*.1; do
  gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
done
install -m 0644 completions/redlock.bash "$root/usr/share/bash-completion/completions/redlock"
install -m 0644 completions/_redlock "$root/usr/share/zsh/vendor-completions/_redlock"
install -m 0644 completions/redlock.fish "$root/usr/share/fish/vendor_completions.d/redlock.fish"
gzip -9n <README.md >"$doc/README.md.gz"
gzip -9n <CHANGELOG.md >"$doc/changelog.gz"
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
# A static binary is the point of this package (it runs on any x86-64 Linux, and in images
# without a libc); lintian flags every static binary as a likely mistake.
cat >"$root/usr/share/lintian/overrides/redlock" <<'EOF'
# Static on purpose: one binary for every x86-64 Linux, built from the musl target.
redlock: statically-linked-binary [usr/bin/redlock]
# A static-pie executable has no interpreter and no libc to need: lintian reads it as a shared
# library without prerequisites.
redlock: shared-library-lacks-prerequisites [usr/bin/redlock]
EOF
chmod 0644 "$root/usr/share/lintian/overrides/redlock"
installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: redlock
Version: $deb_version
Architecture: amd64
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
deb=$dist/redlock_${deb_version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null

(cd "$dist" && sha256sum "$name.tar.gz" "$(basename "$deb")" >SHA256SUMS)
rm -rf "$dist/stage" "$dist/deb"
say "wrote $dist/$name.tar.gz, $deb, $dist/SHA256SUMS"

[[ -n $check ]] || exit 0

# --- checks -------------------------------------------------------------------------------
command -v lintian >/dev/null || apt_install lintian
command -v man >/dev/null || apt_install man-db
command -v redis-server >/dev/null || apt_install redis-server
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
# lintian refuses to run as root unless told; errors fail the check, warnings are shown.
lintian --allow-root --fail-on error --tag-display-limit 0 "$deb"
scratch=$(mktemp -d)
redis_pid=
cleanup() {
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
dpkg -x "$deb" "$scratch/root"
installed=$scratch/root/usr/bin/redlock
first=$("$installed" --version | head -n 1)
[[ $first == "redlock $version ("*"$target)" ]] || { say "--version says: $first"; exit 1; }
say "$first"
for page in "$scratch"/root/usr/share/man/man1/*.1.gz; do
  if ! MANWIDTH=80 man -l "$page" >/dev/null 2>"$scratch/man.err" || [[ -s $scratch/man.err ]]; then
    say "man -l $(basename "$page") failed:"
    cat "$scratch/man.err" >&2
    exit 1
  fi
done
# One exec against a scratch redis-server on a Unix socket (no port to collide with).
redis-server --port 0 --unixsocket "$scratch/redis.sock" --save '' --appendonly no \
  --daemonize no >"$scratch/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
  [[ -S $scratch/redis.sock ]] && break
  sleep 0.05
done
# The same from the .deb and from the unpacked tarball: --version, and one exec.
mkdir "$scratch/tar"
tar -xzf "$dist/$name.tar.gz" -C "$scratch/tar"
unpacked=$scratch/tar/$name/redlock
first=$("$unpacked" --version | head -n 1)
[[ $first == "redlock $version ("*"$target)" ]] || { say "the tarball's --version says: $first"; exit 1; }
for binary in "$installed" "$unpacked"; do
  out=$("$binary" -u "unix://$scratch/redis.sock" exec dist-check -- sh -c 'echo "fence $REDLOCK_FENCE"')
  [[ $out == "fence "* ]] || { say "$binary: exec said: $out"; exit 1; }
  "$binary" -u "unix://$scratch/redis.sock" status dist-check >/dev/null || [[ $? -eq 1 ]]
  say "ran $binary: $out"
done
# Against the static binary, the tests that exercise: TLS (rustls); the supervisor (exec); the
# keeper (`acquire --while-pid`: a re-exec of /proc/self/exe, pidfds, announcements); and the
# subreaper (PR_SET_CHILD_SUBREAPER: --max-runtime and --preemptible stop what the command left
# running).
REDLOCK_TEST_BIN=$(realpath "$installed") REDLOCK_REQUIRE_REDIS=1 \
  cargo test --locked --quiet --test it -- topology::tls:: exec::run:: safety::while_pid:: \
    safety::announcements:: safety::max_runtime:: safety::preempt:: \
    --skip safety::while_pid::attack:: 2>&1 |
  grep -E '^test result|FAILED|panicked' >&2
say "checked"
