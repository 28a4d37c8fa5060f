#!/usr/bin/env bash
# Packs what scripts/device-check.sh needs on a lent GPU machine that has no Node.js and no
# registry: this machine's node binary, the production node_modules (Temporal's native bridge for
# x86-64 Linux only), and wrk and nginx with the libraries they link. Into .device/ (ignored; about
# 42 MB), which a device run carries together with dist/. Run `npm run build` first.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp package.json package-lock.json "$work/"
(cd "$work" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund >/dev/null)
for release in "$work"/node_modules/@temporalio/core-bridge/releases/*; do
  [ "$(basename "$release")" = x86_64-unknown-linux-gnu ] || rm -rf "$release"
done
# Only Temporal's workflow bundler uses swc, and nothing here bundles workflows.
rm -rf "$work/node_modules/@swc" "$work/node_modules/@temporalio/core-bridge/sdk-core"
rm -rf .device && mkdir -p .device "$work/tools/bin" "$work/tools/lib" "$work/tools/real"
xz -T0 -6 -c "$(command -v node)" > .device/node.xz
tar -C "$work" -cJf .device/node_modules.tar.xz node_modules
for tool in wrk nginx; do
  binary=$(command -v "$tool" || PATH=$PATH:/usr/sbin command -v "$tool") || { echo "install $tool first (apt-get install $tool)" >&2; exit 1; }
  cp "$binary" "$work/tools/real/"
  # The machine's own libraries may differ from the ones this build links: it gets these.
  ldd "$binary" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|ld-linux[^/]*)\.so' | xargs -r cp -L -t "$work/tools/lib/"
  printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")/..\nLD_LIBRARY_PATH=$d/lib exec "$d/real/%s" "$@"\n' "$tool" > "$work/tools/bin/$tool"
  chmod +x "$work/tools/bin/$tool"
done
tar -C "$work/tools" -cJf .device/tools.tar.xz bin lib real
du -sh .device
