# job_backend = systemd (issue 22; docs/job-isolation.md "The systemd backend"), inside the
# container test/systemd/nspawn-test booted (its v1 controllers remounted read-write, so TasksMax
# and MemoryMax apply). Sourced by nspawn-test after its reload step: uses its inside, fail, step,
# $tmp, the container's root $tmp/os and the user alice. Checks: a job is a transient unit in
# motor-jobs.slice while it runs and is gone after, with its limits, the job account and empty
# capability bounding and ambient sets (its main process holds none either), no capabilities and
# motor-init as PID 1 inside, its output byte-exact; a fork bomb stops at TasksMax; a balloon is
# OOM-killed and reported; cancel and timeout leave no unit and no process; a job with an
# idmapped cache runs directly; after kill -9 of the runner its restart stops the unit left and
# records outcome_unknown, and leaves another runner instance's unit alone; the balloon's resource_usage;
# a VM job's QEMU is a unit of its own (motor-qemu, an empty environment, a network and a root of
# its own, TasksMax and MemoryMax: docs/windows-jobs.md "QEMU as a systemd unit") and the job's
# output comes back; after kill -9 of the runner during a VM job its restart stops the QEMU unit,
# deletes the job's files and records outcome_unknown; `motor-runner gate` passes under this backend. Leaves the runner on
# job_backend = direct again.

job_units() { inside systemctl list-units --all --plain --no-legend 'motor-job-*' | awk '{print $1}'; }
job_processes() { inside ps -u motor-job -o pid=,comm= 2>/dev/null; }
as_alice() { inside runuser -u alice -- sh -c "cd /tmp && $1"; }
wait_for_unit() {
  for _ in $(seq 1 100); do
    [[ -n $(job_units) ]] && return 0
    sleep 0.1
  done
  fail "$1: no job unit appeared"
}
# Sets `id` to the job id in a client's --json output (FILE) once its `accepted` frame is there:
# the unit can appear before it, as the sandbox is built while the job's record is saved.
wait_for_job_id() {  # FILE WHAT
  for _ in $(seq 1 100); do
    id=$(job_id_of "$1")
    [[ -n $id ]] && return 0
    sleep 0.1
  done
  fail "$2: no job id in the client's output"
}
no_unit_or_process() {  # WHAT: nothing of the job is left
  local left
  for _ in $(seq 1 50); do
    [[ -z $(job_units) && -z $(job_processes) ]] && return 0
    sleep 0.1
  done
  fail "$1 left: units [$(job_units)] processes [$(job_processes)]"
}
job_id_of() { grep -o '"job_id":"[^"]*"' "$1" | head -1 | cut -d'"' -f4; }
runner_active() {
  for _ in $(seq 1 150); do
    [[ $(inside systemctl is-active motor-runner) == active ]] && return 0
    sleep 0.2
  done
  inside journalctl -u motor-runner --no-pager -n 30 >&2
  fail "motor-runner.service is not active"
}
use_backend() {  # BACKEND PIDS_MAX
  inside sed -i -e "s/^job_backend = .*/job_backend = $1/" -e "s/^pids_max = .*/pids_max = $2/" \
    /etc/motor/motor-runner.conf || fail "editing the config"
  inside systemctl restart motor-runner || fail "restarting the runner for job_backend = $1"
  runner_active
}

# The jobs' programs, on the read-only /usr every job sees.
mkdir -p "$tmp/os/usr/local/bin"
cat >"$tmp/os/usr/local/bin/motor-t-identity" <<'EOF'
#!/bin/sh
echo "uid $(id -u) pid1 $(cat /proc/1/comm) net $(awk -F: 'NR > 2 {gsub(/ /, "", $1); print $1}' /proc/net/dev | tr '\n' ' ')"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t ' ' '
EOF
cat >"$tmp/os/usr/local/bin/motor-t-output" <<'EOF'
#!/bin/sh
sleep 1
printf 'a\000b\377\n'
printf 'to-stderr' >&2
EOF
cat >"$tmp/os/usr/local/bin/motor-t-forks" <<'EOF'
#!/usr/bin/python3
import os, time
n = 0
try:
    for _ in range(300):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except BlockingIOError:
    pass
print("forks", n, flush=True)
EOF
# A windows job (the CLI has no platform option): exec.run over the socket, output to stdout, the
# terminal record as the last line.
cat >"$tmp/os/usr/local/bin/motor-t-vm-run" <<'EOF'
#!/usr/bin/python3
import base64, json, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(240)
s.connect("/run/motor/motor.sock")
request = json.dumps({"id": 1, "method": "exec.run",
                      "params": {"command": sys.argv[1], "platform": "windows", "memory": "256M"}}).encode()
s.sendall(struct.pack(">I", len(request)) + request)
def exact(n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            sys.exit("the runner closed the connection")
        buf += chunk
    return buf
while True:
    record = json.loads(exact(struct.unpack(">I", exact(4))[0]))
    if record.get("type") == "output":
        sys.stdout.write(base64.b64decode(record["bytes"]).decode(errors="replace"))
    elif record.get("type") == "terminal" or "error" in record:
        print(json.dumps(record, separators=(",", ":")))
        break
EOF
chmod 755 "$tmp/os/usr/local/bin/"motor-t-*

step "job_backend = systemd: the runner starts"
use_backend systemd 64
invocation=$(inside systemctl show -p InvocationID --value motor-runner)
inside journalctl -u motor-runner --no-pager "_SYSTEMD_INVOCATION_ID=$invocation" | grep -q 'Linux jobs run as transient units' ||
  fail "the runner did not choose the systemd backend"

step "a job is a transient unit while it runs, gone after; its output byte-exact"
as_alice 'exec motor run --no-sync -- /usr/local/bin/motor-t-output' >"$tmp/unit.out" 2>"$tmp/unit.err" &
client=$!
wait_for_unit "a running job"
unit=$(job_units)
# Named after the runner's instance (8 hex digits of its state dir's hash) and the job.
[[ $unit =~ ^motor-job-[0-9a-f]{8}-[^.]+\.service$ ]] || fail "the unit's name: $unit"
props=$(inside systemctl show -p Slice -p TasksMax -p MemoryMax -p NoNewPrivileges -p KillMode -p User "$unit")
grep -qx 'Slice=motor-jobs.slice' <<<"$props" && grep -qx 'TasksMax=64' <<<"$props" && grep -qx 'User=motor-job' <<<"$props" &&
  grep -qx 'NoNewPrivileges=yes' <<<"$props" && grep -qx 'KillMode=control-group' <<<"$props" &&
  grep -q '^MemoryMax=[0-9]' <<<"$props" || fail "the unit's properties: $props"
main_pid=$(inside systemctl show -p MainPID --value "$unit")
entry_uid=$(inside awk '/^Uid:/ {print $2}' "/proc/$main_pid/status")
[[ $entry_uid == $(inside id -u motor-job) ]] || fail "the unit's main process (pid $main_pid) runs as uid $entry_uid"
# No capability anywhere in the unit: motor-unit-entry builds the sandbox in a user namespace of
# the job's own (sandbox/user_namespace.hpp).
caps=$(inside systemctl show -p CapabilityBoundingSet -p AmbientCapabilities "$unit")
grep -qx 'CapabilityBoundingSet=' <<<"$caps" && grep -qx 'AmbientCapabilities=' <<<"$caps" ||
  fail "the unit's capabilities are not empty: $caps"
entry_caps=$(inside grep -E '^Cap(Prm|Eff|Bnd|Amb):' "/proc/$main_pid/status" | tr -s '\t ' ' ' | tr '\n' ' ')
[[ $entry_caps == 'CapPrm: 0000000000000000 CapEff: 0000000000000000 CapBnd: 0000000000000000 CapAmb: 0000000000000000 ' ]] ||
  fail "the unit's main process holds capabilities: $entry_caps"
wait "$client" || { cat "$tmp/unit.err" >&2; fail "the job through the unit failed"; }
printf 'a\000b\377\n' | cmp - "$tmp/unit.out" || fail "stdout is not byte-exact: $(od -c "$tmp/unit.out" | head -3)"
[[ $(cat "$tmp/unit.err") == to-stderr ]] || fail "stderr: $(cat "$tmp/unit.err")"
no_unit_or_process "a finished job"

step "inside the unit: the job account, no capabilities, motor-init as PID 1, loopback only"
identity=$(as_alice 'motor run --no-sync -- /usr/local/bin/motor-t-identity' 2>&1)
job_uid=$(inside id -u motor-job)
grep -q "^uid $job_uid pid1 motor-init net lo $" <<<"$identity" && grep -q '^CapEff: 0000000000000000$' <<<"$identity" &&
  grep -q '^CapBnd: 0000000000000000$' <<<"$identity" && grep -q '^NoNewPrivs: 1$' <<<"$identity" &&
  grep -q '^Seccomp: 2$' <<<"$identity" || fail "the job's identity in its unit: $identity"

step "a fork bomb stops at TasksMax"
forks=$(as_alice 'motor run --no-sync -- /usr/local/bin/motor-t-forks' 2>&1)
n=$(sed -n 's/^forks \([0-9]*\)$/\1/p' <<<"$forks")
[[ -n $n && $n -lt 64 ]] || fail "the fork bomb was not stopped at TasksMax=64: $forks"
no_unit_or_process "the fork bomb"
# The same bomb under a limit it does not reach makes all its 300 forks: the 64 stopped it.
inside sed -i -e "s/^pids_max = .*/pids_max = 4096/" /etc/motor/motor-runner.conf && inside systemctl reload motor-runner ||
  fail "reloading pids_max"
for _ in $(seq 1 50); do
  inside journalctl -u motor-runner --no-pager | grep -q 'now in effect: pids_max' && break
  sleep 0.2
done
forks=$(as_alice 'motor run --no-sync -- /usr/local/bin/motor-t-forks' 2>&1)
[[ $forks == "forks 300" ]] || fail "under TasksMax=4096 the bomb made: $forks"

step "a balloon is OOM-killed and reported"
as_alice "motor run --no-sync --json --memory 64M -- python3 -c 'b = b\"x\" * (512 << 20)'" >"$tmp/oom.json" 2>&1
grep -q '"type":"terminal"' "$tmp/oom.json" && grep -q '"oom_killed":true' "$tmp/oom.json" ||
  fail "the balloon's terminal record: $(tail -2 "$tmp/oom.json")"
no_unit_or_process "the balloon"
as_alice "motor run --no-sync --json --memory 1G -- python3 -c 'b = b\"x\" * (512 << 20)'" >"$tmp/no-oom.json" 2>&1
grep -q '"outcome":{"type":"exit","code":0}' "$tmp/no-oom.json" && ! grep -q '"oom_killed":true' "$tmp/no-oom.json" ||
  fail "the balloon under a 1G limit: $(tail -1 "$tmp/no-oom.json")"
# resource_usage, read by the entry from the unit's cgroup: the 512 MiB balloon's peak.
peak=$(grep -o '"memory_peak_bytes":[0-9]*' "$tmp/no-oom.json" | cut -d: -f2)
[[ -n $peak && $peak -ge $((512 << 20)) ]] && grep -q '"cpu_user_us":[0-9]' "$tmp/no-oom.json" ||
  fail "the balloon's resource_usage: $(tail -1 "$tmp/no-oom.json")"

step "cancel and timeout leave no unit and no process"
as_alice 'exec motor run --no-sync --json -- sleep 600' >"$tmp/cancel.json" 2>&1 &
client=$!
wait_for_unit "the job to cancel"
wait_for_job_id "$tmp/cancel.json" "the job to cancel"
as_alice "motor cancel $id" >/dev/null || fail "motor cancel"
wait "$client"
grep -q '"killed":"cancel"' "$tmp/cancel.json" || fail "the cancelled job's terminal: $(tail -1 "$tmp/cancel.json")"
no_unit_or_process "a cancelled job"
as_alice 'motor run --no-sync --json --timeout 1 -- sleep 600' >"$tmp/timeout.json" 2>&1
grep -q '"killed":"deadline"' "$tmp/timeout.json" || fail "the timed-out job's terminal: $(tail -1 "$tmp/timeout.json")"
no_unit_or_process "a timed-out job"

step "a job with a cache another account owns runs directly (its idmapped bind needs the direct backend)"
inside sh -c 'mkdir -p /var/cache/motor-t-shared && echo shared >/var/cache/motor-t-shared/f &&
  chown -R motor-cache: /var/cache/motor-t-shared' || fail "making the shared cache"
set_cache_paths() {
  inside sed -i "s|^cache_paths =.*|cache_paths = $1|" /etc/motor/motor-runner.conf || fail "editing cache_paths"
  inside systemctl restart motor-runner || fail "restarting the runner for cache_paths = $1"
  runner_active
}
set_cache_paths /var/cache/motor-t-shared
# Shown as the job's own through the idmap, which only the direct backend makes.
seen=$(as_alice 'motor run --no-sync -- stat -c "%U %n" /var/cache/motor-t-shared/f' 2>&1)
[[ $seen == "motor-job /var/cache/motor-t-shared/f" ]] || fail "the job with an idmapped cache: $seen"
set_cache_paths ""
inside rm -rf /var/cache/motor-t-shared
no_unit_or_process "the job with an idmapped cache"

step "kill -9 of the runner: its restart stops the unit left and records outcome_unknown, and no other runner's"
# Another runner instance's job unit (as the gate's own runner makes): the restart leaves it.
foreign=motor-job-00000000-foreign.service
inside systemd-run -q --unit="$foreign" --slice=motor-jobs.slice sleep 600 || fail "starting $foreign"
as_alice 'exec motor run --no-sync --json -- sleep 600' >"$tmp/lost.json" 2>&1 &
client=$!
for _ in $(seq 1 100); do
  [[ $(job_units | grep -vc foreign) -gt 0 ]] && break
  sleep 0.1
done
wait_for_job_id "$tmp/lost.json" "the job the runner loses"
inside systemctl kill --signal=KILL --kill-who=main motor-runner || fail "kill -9 of the runner"
[[ $(job_units | grep -vc foreign) -gt 0 ]] || fail "the job's unit went with the runner (it should outlive it, for the restart to find)"
sleep 2.5  # Restart=on-failure, RestartSec=2
runner_active
[[ $(inside systemctl is-active "$foreign") == active ]] || fail "the restart stopped $foreign, another runner's unit"
inside systemctl stop "$foreign"
no_unit_or_process "the runner's restart"
status=$(as_alice "motor status --json $id" 2>&1)
grep -q 'outcome_unknown' <<<"$status" || fail "the lost job's status after the restart: $status"
kill "$client" 2>/dev/null
wait "$client" 2>/dev/null

step "a VM job's QEMU is a transient unit: motor-qemu, no environment, its own network and root, its limits"
guest=$("$src/scripts/build-test-guest") || fail "scripts/build-test-guest"
mkdir -p "$tmp/os/var/lib/motor-t-guest" && cp -p "$guest/vmlinuz" "$guest/initrd.img" "$guest/base.qcow2" \
  "$tmp/os/var/lib/motor-t-guest/" || fail "copying the test guest"
set_vm_image() {  # IMAGE: the test guest's, or "" (no VM jobs)
  local g=/var/lib/motor-t-guest kernel= initrd= cmdline= emulation=false accelerator=auto
  [[ -n $1 ]] && kernel=$g/vmlinuz initrd=$g/initrd.img cmdline="console=ttyS0 panic=-1" emulation=true accelerator=tcg
  inside sed -i -e "s|^vm_image = .*|vm_image = \"$1\"|" -e "s|^vm_kernel = .*|vm_kernel = \"$kernel\"|" \
    -e "s|^vm_initrd = .*|vm_initrd = \"$initrd\"|" -e "s|^vm_kernel_cmdline = .*|vm_kernel_cmdline = \"$cmdline\"|" \
    -e "s|^allow_emulation = .*|allow_emulation = $emulation|" -e "s|^vm_accelerator = .*|vm_accelerator = $accelerator|" \
    -e "s|^vm_agent_timeout_s = .*|vm_agent_timeout_s = 120|" \
    /etc/motor/motor-runner.conf || fail "editing the VM settings"
  inside systemctl restart motor-runner || {
    inside journalctl -u motor-runner --no-pager -n 20 >&2
    fail "restarting the runner for vm_image = $1"
  }
  runner_active
}
await_qemu_unit() {  # sets vm_unit and qemu_pid: the job unit whose main process is QEMU (60 s at most)
  vm_unit= qemu_pid=
  local pid u
  for _ in $(seq 1 600); do
    for u in $(job_units); do
      pid=$(inside systemctl show -p MainPID --value "$u")
      [[ $pid -gt 1 && $(inside cat "/proc/$pid/comm" 2>/dev/null) == qemu-system-x86 ]] && qemu_pid=$pid && vm_unit=$u
    done
    [[ -n $qemu_pid ]] && return 0
    kill -0 "$client" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
set_vm_image /var/lib/motor-t-guest/base.qcow2
as_alice 'exec /usr/local/bin/motor-t-vm-run "echo from-the-vm; sleep 5"' >"$tmp/vm.out" 2>&1 &
client=$!
await_qemu_unit || {
  cat "$tmp/vm.out" >&2
  inside journalctl -u motor-runner --no-pager -n 30 >&2
  fail "no QEMU unit appeared"
}
props=$(inside systemctl show -p User -p Slice -p TasksMax -p MemoryMax -p PrivateNetwork -p PrivateDevices -p DevicePolicy \
  -p NoNewPrivileges -p CapabilityBoundingSet -p RootDirectory "$vm_unit")
grep -qx 'User=motor-qemu' <<<"$props" && grep -qx 'Slice=motor-jobs.slice' <<<"$props" &&
  grep -q '^TasksMax=[0-9]' <<<"$props" && grep -q '^MemoryMax=[0-9]' <<<"$props" && grep -qx 'PrivateNetwork=yes' <<<"$props" &&
  grep -qx 'PrivateDevices=yes' <<<"$props" && grep -qx 'DevicePolicy=closed' <<<"$props" &&
  grep -qx 'NoNewPrivileges=yes' <<<"$props" && grep -qx 'CapabilityBoundingSet=' <<<"$props" &&
  grep -q '^RootDirectory=/var/lib/motor/vm/.*\.root$' <<<"$props" || fail "the QEMU unit's properties: $props"
qemu_uid=$(inside id -u motor-qemu)
[[ $(inside awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$qemu_pid/status") == "$qemu_uid $qemu_uid $qemu_uid $qemu_uid" ]] ||
  fail "QEMU's uids: $(inside grep Uid: "/proc/$qemu_pid/status")"
qemu_env=$(inside cat "/proc/$qemu_pid/environ" | tr '\0' ' ')
[[ -z $qemu_env ]] || fail "QEMU's environment is not empty: $qemu_env"
# A network namespace of its own (the container's, which the runner has, holds only lo as well).
[[ $(inside readlink "/proc/$qemu_pid/ns/net") != "$(inside readlink /proc/1/ns/net)" ]] ||
  fail "QEMU is in the host's network namespace"
# Its root holds what QEMU needs and nothing else of the host's (empty mount points aside).
inside touch /root/motor-t-secret
echo "QEMU's root: $(inside ls -A "/proc/$qemu_pid/root" | tr '\n' ' ')" >&2
for absent in /etc/passwd /root/motor-t-secret /home/alice /var/lib/motor/state.db /run/motor/motor.sock /dev/kvm; do
  inside test -e "/proc/$qemu_pid/root$absent" && fail "QEMU's root has $absent: $(inside ls -la "/proc/$qemu_pid/root$absent" 2>&1 | head -5)"
done
for present in /usr/bin/qemu-system-x86_64 /var/lib/motor-t-guest/base.qcow2 /dev/null; do
  inside test -e "/proc/$qemu_pid/root$present" || fail "QEMU's root lacks $present"
done
wait "$client"
grep -q '^from-the-vm$' "$tmp/vm.out" && grep -q '"outcome":{"type":"exit","code":0}' "$tmp/vm.out" || {
  inside journalctl -u motor-runner --no-pager -n 40 >&2
  inside journalctl -u "$vm_unit" --no-pager -n 30 >&2
  fail "the VM job: $(cat "$tmp/vm.out")"
}
no_unit_or_process "the VM job"
[[ -z $(inside ls -A /var/lib/motor/vm) ]] || fail "the VM job left $(inside ls -A /var/lib/motor/vm) in /var/lib/motor/vm"

step "kill -9 of the runner during a VM job: its restart stops the QEMU unit, deletes the job's files, records outcome_unknown"
as_alice 'exec /usr/local/bin/motor-t-vm-run "sleep 600"' >"$tmp/vm-lost.out" 2>&1 &
client=$!
await_qemu_unit || fail "no QEMU unit appeared for the VM job to lose: $(cat "$tmp/vm-lost.out")"
id=${vm_unit%.service}
id=${id#motor-job-*-}
inside systemctl kill --signal=KILL --kill-who=main motor-runner || fail "kill -9 of the runner"
[[ $(inside systemctl is-active "$vm_unit") == active ]] || fail "the QEMU unit went with the runner (it should outlive it)"
sleep 2.5  # Restart=on-failure, RestartSec=2
runner_active
no_unit_or_process "the runner's restart after a VM job"
for _ in $(seq 1 100); do
  [[ -z $(inside pgrep -u motor-qemu) && -z $(inside ls -A /var/lib/motor/vm) ]] && break
  sleep 0.1
done
[[ -z $(inside pgrep -u motor-qemu) ]] || fail "QEMU outlived the restart: $(inside ps -u motor-qemu -o pid=,comm=)"
[[ -z $(inside ls -A /var/lib/motor/vm) ]] || fail "the restart left $(inside ls -A /var/lib/motor/vm) in /var/lib/motor/vm"
status=$(as_alice "motor status --json $id" 2>&1)
grep -q 'outcome_unknown' <<<"$status" || fail "the lost VM job's status after the restart: $status"
kill "$client" 2>/dev/null
wait "$client" 2>/dev/null
set_vm_image ""

step "motor-runner gate under job_backend = systemd: every attack stopped"
# The packaged config with the systemd backend, pids_max = 4096, and a maximum timeout the
# fork-bomb attack's 120 s fits (the reload step above lowered it to 60 s).
inside sh -c "sed -e 's/^max_timeout_s = .*/max_timeout_s = 3600/' /etc/motor/motor-runner.conf >/run/gate-systemd.conf" ||
  fail "the gate's config"
gate_since=$(inside date '+%Y-%m-%d %H:%M:%S')
gate_started=$SECONDS
inside timeout 600 motor-runner gate --config /run/gate-systemd.conf >"$tmp/gate-systemd.log" 2>&1 ||
  { tail -40 "$tmp/gate-systemd.log" >&2; fail "the gate under job_backend = systemd failed"; }
echo "gate under job_backend = systemd: $((SECONDS - gate_started)) s; $(tail -1 "$tmp/gate-systemd.log")" >&2
# Its attacks ran as units (the gate's runner is an instance of its own).
units_run=$(inside journalctl --no-pager --since "$gate_since" -o cat | grep -c '^Started motor-job-')
[[ $units_run -ge 20 ]] || fail "the gate's jobs were not units: $units_run started"
no_unit_or_process "the gate"

# The benchmark (bench/systemd_start.py), only when asked: MOTOR_SYSTEMD_BENCH=ROUNDS.
if [[ -n ${MOTOR_SYSTEMD_BENCH:-} ]]; then
  step "bench/systemd_start.py ${MOTOR_SYSTEMD_BENCH} (systemd backend, direct, systemd-run)"
  cp "$src/bench/systemd_start.py" "$tmp/os/root/" &&
    inside python3 /root/systemd_start.py "$MOTOR_SYSTEMD_BENCH" >&2 || fail "bench/systemd_start.py"
  no_unit_or_process "the benchmark"
fi

use_backend direct 4096
