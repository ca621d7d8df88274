#!/usr/bin/env bash
# deploy/check-image-build.sh — proves the Dockerfile's build stage builds the
# release binary, where no image registry can be reached.
#
# The closest honest stand-in for `docker build`: a minimal Debian bookworm root
# made from Debian's packages with mmdebstrap, holding what the build stage's base
# (rust:<v>-slim-bookworm) holds besides Rust — gcc, libc6-dev, ca-certificates —
# and nothing else. The host's Rust toolchain (the version the Dockerfile pins)
# is copied in as rustup installs it there. Then the build stage's own RUN
# commands, read from the Dockerfile, run in that root, and the stage's cargo
# build runs after them. A missing build dependency fails here as it would in
# `docker build`.
#
#   sudo deploy/check-image-build.sh            # keeps nothing; prints the log path
#
# Needs root (chroot, mounts), mmdebstrap (Debian: mmdebstrap) and network access
# to Debian's mirror and crates.io. Takes a release build's time (~10 min on two
# cores). The last run and its result are recorded in deploy/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

[ "$(id -u)" = 0 ] || { echo "check-image-build: run as root (chroot)" >&2; exit 2; }
command -v mmdebstrap >/dev/null || { echo "check-image-build: needs mmdebstrap" >&2; exit 2; }

want=$(sed -n 's/^ARG RUST_VERSION=//p' Dockerfile)
have=$(rustc --version | awk '{print $2}')
case "$have" in "$want"|"$want".*) ;; *)
    echo "check-image-build: the Dockerfile pins Rust $want, the host has $have" >&2; exit 2;;
esac

root=$(mktemp -d /tmp/callgate-imgroot.XXXXXX)
log="$root.log"
cleanup() {
    for m in proc dev sys; do umount -l "$root/$m" 2>/dev/null || true; done
    rm -rf "$root"
}
trap cleanup EXIT

# The build stage's RUN commands, continuation lines joined, except the cargo
# build (it carries BuildKit cache mounts; run below without them).
stage_runs=$(awk '
    function piece(line) { cont = line ~ /\\$/; sub(/\\$/, "", line); return line }
    /^FROM .* AS build/ { in_build = 1; next }
    /^FROM / { in_build = 0 }
    in_build && /^RUN / { cmd = piece(substr($0, 5)); if (!cont) { print cmd; cmd = "" }; next }
    in_build && cont { cmd = cmd " " piece($0); if (!cont) { print cmd; cmd = "" } }
' Dockerfile | grep -v -- '--mount=' || true)

echo "check-image-build: making a bookworm root in $root (log: $log)"
mmdebstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$root" >"$log" 2>&1
for m in proc dev sys; do mount --bind "/$m" "$root/$m"; done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The host's trust store: a host that reaches crates.io through an
# intercepting proxy trusts the proxy's CA, and so must the root (as a
# docker build on that host would need it too). Nothing else is copied.
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"

# The toolchain where rust:<v>-slim keeps it, and the source as COPY leaves it.
mkdir -p "$root/usr/local/rustup" "$root/usr/local/cargo/bin" "$root/src"
toolchain=$(readlink -f "$(ls -d "${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$have-"*linux-gnu | head -n 1)")
cp -a "$toolchain" "$root/usr/local/rustup/toolchain"
ln -s /usr/local/rustup/toolchain/bin/cargo "$root/usr/local/cargo/bin/cargo"
ln -s /usr/local/rustup/toolchain/bin/rustc "$root/usr/local/cargo/bin/rustc"
git -C "$repo" archive HEAD | tar -x -C "$root/src"

env_in="PATH=/usr/local/cargo/bin:/usr/bin:/bin CARGO_HOME=/usr/local/cargo HOME=/root"
echo "check-image-build: the build stage's RUN commands:"
printf '%s\n' "$stage_runs"
chroot "$root" /usr/bin/env -i $env_in sh -ec "$stage_runs" >>"$log" 2>&1
echo "check-image-build: cargo build --release --locked -p callgate-cli in the root …"
started=$(date +%s)
if chroot "$root" /usr/bin/env -i $env_in sh -ec \
    'cd /src && cargo build --release --locked -p callgate-cli' >>"$log" 2>&1; then
    secs=$(( $(date +%s) - started ))
    "$root/src/target/release/callgate" --version
    echo "check-image-build: PASS in ${secs}s (log: $log)"
    trap - EXIT; cleanup
else
    tail -30 "$log"
    echo "check-image-build: FAIL (log: $log)"
    exit 1
fi
