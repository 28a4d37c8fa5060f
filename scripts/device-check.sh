#!/usr/bin/env bash
# The checks that need a real GPU host and many cores, in one run on a lent device machine
# (see /work/.library/device in the developers' workplace): unpacks what scripts/device-pack.sh
# packed, then check:gpu-host (nvidia-smi discovery through the agent, CUDA_VISIBLE_DEVICES
# isolation of engines) and bench:router at each of ROUTER_WORKERS (default "1 2 4 8"), then one
# profiled single-worker round. Logs and profiles go to $OUT (default /tmp/llmgw-device-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/llmgw-device-out}
mkdir -p "$out" /tmp/llmgw-node/bin /tmp/llmgw-tools
# Python's lzma rather than xz: the machine may have no xz.
python3 - <<'PY' || exit 1
import lzma, shutil, tarfile
with lzma.open('.device/node.xz') as src, open('/tmp/llmgw-node/bin/node', 'wb') as dst:
    shutil.copyfileobj(src, dst)
tarfile.open('.device/node_modules.tar.xz').extractall('.')
tarfile.open('.device/tools.tar.xz').extractall('/tmp/llmgw-tools')
PY
chmod +x /tmp/llmgw-node/bin/node
export PATH=/tmp/llmgw-node/bin:/tmp/llmgw-tools/bin:$PATH
echo "== machine: $(nproc) CPUs, node $(node --version), $(nvidia-smi -L 2>&1 | head -4)"
echo "== check:gpu-host"
node dist/bench/gpu-host.js 2>&1 | tee "$out/gpu-host.log"
for workers in ${ROUTER_WORKERS:-1 2 4 8}; do
  echo "== bench:router --router-workers $workers"
  node dist/bench/router.js --router-workers "$workers" > "$out/router-w$workers.log" 2>&1
  grep -v '^  round\|^  rounds' "$out/router-w$workers.log" | grep -v '^$'
done
echo "== bench:router, one worker, CPU profile of the router"
mkdir -p "$out/prof"
LLMGW_BENCH_CPU_PROF="$out/prof" node dist/bench/router.js --rounds 1 > "$out/router-prof.log" 2>&1
ls -la "$out/prof"
