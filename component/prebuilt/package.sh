#!/bin/sh
# Packages Stele's library crates (stele, stele-components, stele-host, stele-archive), with the
# components built from this checkout inside stele-components.
#
#   component/prebuilt/package.sh [CARGO-PACKAGE-ARGS...]   build, place in wasm/, cargo package
#   component/prebuilt/package.sh --check                   build, compare with wasm/, fail on a difference
#
# `cargo package` verifies each package by building it from its unpacked files (target/package/),
# the workspace's crates resolved from one another's packages before any is published; pass
# --no-verify to skip that build. The packages are in target/package/*.crate.
#
# The build is the one every checkout's `cargo build` runs (component/prebuilt/build.rs, from
# source): a nested `cargo build --target wasm32-wasip2 --release` with the checkout's path and
# CARGO_HOME remapped, so two checkouts give the same bytes. It must run on the pinned toolchain
# below, because another rustc gives other bytes. `wasm/` is ignored by git: the bytes travel in
# the package, never in the history.
set -eu

PINNED_RUSTC=1.95.0
COMPONENTS="stele.wasm stele-async.wasm stele-wasi.wasm"
# The library crates a release packages.
CRATES="stele stele-components stele-host stele-archive"

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

rustc_version=$(rustc --version | cut -d' ' -f2)
if [ "$rustc_version" != "$PINNED_RUSTC" ]; then
    echo "package.sh: rustc is $rustc_version; the components are built with $PINNED_RUSTC" \
        "(with rustup: RUSTUP_TOOLCHAIN=$PINNED_RUSTC $0 $*)" >&2
    exit 1
fi

cargo build --release -p stele-components
built="$root/target/guest"
placed="$root/component/prebuilt/wasm"

if [ "${1:-}" = "--check" ]; then
    status=0
    for file in $COMPONENTS; do
        if ! cmp -s "$built/$file" "$placed/$file"; then
            echo "package.sh --check: $placed/$file differs from a fresh build of this checkout" >&2
            status=1
        fi
    done
    [ "$status" = 0 ] && echo "package.sh --check: wasm/ holds exactly what this checkout builds"
    exit "$status"
fi

mkdir -p "$placed"
for file in $COMPONENTS; do
    cp "$built/$file" "$placed/$file"
done
# cargo refuses the placed components as uncommitted changes (they are ignored by git on
# purpose), so it is told to allow them; every other file must be committed, as cargo would ask.
if [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
    dirty=$(git -C "$root" status --porcelain)
    if [ -n "$dirty" ]; then
        echo "package.sh: commit these first (the packages are made from what git holds):" >&2
        echo "$dirty" >&2
        exit 1
    fi
fi
# The verification unpacks each package the others depend on into cargo's registry source
# cache, by name and version, and reuses an unpacking it finds there: an earlier package of the
# same version would be built instead of this one. Those directories only ever hold our own
# earlier packages (nothing is published), so they go first.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
for crate in $CRATES; do
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$crate-$version"
done
packages=""
for crate in $CRATES; do
    packages="$packages -p $crate"
done
# $packages is split on purpose: one `-p NAME` pair per crate.
cargo package --allow-dirty $packages "$@"
