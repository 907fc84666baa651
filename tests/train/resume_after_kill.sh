#!/usr/bin/env bash
# The whole job killed: SIGKILL the example trainer's controller (its replicas end with it, by
# their lifelines) once it has written complete checkpoints, plant a torn and a corrupt newer
# checkpoint, and run it again: it must resume from the newest complete, uncorrupted checkpoint
# with a warning for each one it passes over, and finish with bitwise identical replicas.
set -euo pipefail
trap 'echo "resume_after_kill.sh: failed at line $LINENO: $BASH_COMMAND"' ERR
ft_train=$1
out=$(mktemp -d /tmp/sceptre-resume-XXXXXX)
trap 'kill -9 "${pid:-0}" 2>/dev/null || true; rm -rf "$out"' EXIT
ck=$out/checkpoints
common=(--replicas 3 --hidden 64 --batch 32 --kill-every 0 --freeze-every 0 --checkpoint-every 10 --keep 10
        --out "$out" --print-every 1000)

"$ft_train" "${common[@]}" --steps 100000 --fresh >"$out/first.log" 2>&1 &
pid=$!
# Wait for three complete checkpoints (generous: sanitizer builds are slow).
for _ in $(seq 1 1200); do
  n=$(ls "$ck"/step-*/manifest.json 2>/dev/null | wc -l || true)
  [ "$n" -ge 3 ] && break
  kill -0 "$pid" 2>/dev/null || { echo "the trainer ended early:"; cat "$out/first.log"; exit 1; }
  sleep 0.1
done
[ "$n" -ge 3 ] || { echo "no three checkpoints after 120 s"; cat "$out/first.log"; exit 1; }
replicas=($(pgrep -P "$pid"))
[ "${#replicas[@]}" -ge 3 ] || { echo "expected 3 replica procs under the trainer, found ${#replicas[@]}"; exit 1; }
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
# Every replica proc of the killed job goes by itself (its lifeline to the controller is cut).
alive() { for p in "${replicas[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
for _ in $(seq 1 300); do
  alive || break
  sleep 0.1
done
if alive; then echo "replicas of the killed job are still running"; kill -9 "${replicas[@]}" 2>/dev/null; exit 1; fi

# (An `if`, not `[ ] && echo`: a newest directory still being written, without a manifest, would
# end the loop with a failure and, under pipefail, the script.)
complete=($(for d in "$ck"/step-*; do if [ -f "$d/manifest.json" ]; then echo "$d"; fi; done))
newest=${complete[-1]}
older=${complete[-2]}
# The newest complete one gets a flipped byte in a shard (same size: only its checksum tells).
shard=$(ls "$newest"/*.safetensors | head -1)
python3 - "$shard" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[-5] ^= 0x40
open(p, 'wb').write(bytes(b))
PY
# And a newer one that never got its manifest (a write torn by the kill).
mkdir -p "$ck/step-999999000000"
echo partial >"$ck/step-999999000000/shard-00000-of-00003.safetensors.tmp"

step_of() { basename "$1" | sed 's/step-0*//'; }
expect=$(step_of "$older")
target=$((expect + 15))
"$ft_train" "${common[@]}" --steps "$target" >"$out/second.log" 2>&1 || { cat "$out/second.log"; exit 1; }
grep -q "checkpoint skipped.*step-999999000000.*no manifest" "$out/second.log" || { echo "torn one not reported"; cat "$out/second.log"; exit 1; }
grep -q "checkpoint skipped.*$(basename "$newest").*checksum" "$out/second.log" || { echo "corrupt one not reported"; cat "$out/second.log"; exit 1; }
grep -q "resumed from the checkpoint of step $expect$" "$out/second.log" || { echo "did not resume from step $expect"; cat "$out/second.log"; exit 1; }
grep -q "15 steps committed" "$out/second.log" || { echo "did not train 15 steps"; cat "$out/second.log"; exit 1; }
grep -q "bitwise identical" "$out/second.log" || { cat "$out/second.log"; exit 1; }
echo "resumed from step $expect past a torn and a corrupt checkpoint"
