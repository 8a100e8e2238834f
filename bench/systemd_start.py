#!/usr/bin/python3
# Job start under job_backend = systemd (issue 22's benchmark), run inside the booted systemd of
# test/systemd/nspawn-test (MOTOR_SYSTEMD_BENCH=ROUNDS test/systemd/nspawn-test runs it there,
# as root, with the packaged runner on job_backend = systemd at /run/motor/motor.sock).
#
# Three ways of running /usr/bin/true, each the whole client process as a user runs it, in the same
# run, interleaved (each round runs all three in a rotating order):
#   systemd  `motor run --no-sync -- /usr/bin/true` to the runner on job_backend = systemd
#   direct   the same to a second runner this script starts (job_backend = direct, its own state
#            dir, socket and cgroup parent), beside the first
#   peer     `systemd-run --wait --pipe -q /usr/bin/true`
# Then, not timed, 20 runs on each runner with log_level = debug, for the medians of the runners'
# start steps (`start steps (us): ...`), and log_level = info again. Then the loop's worst stall
# (runner.status loop_worst_stall_us and loop_worst_cpu_us, reset first) while 20 clients each start
# `echo started; sleep 0.2` at once on the systemd backend, in each of 11 bursts (their median).
# Prints medians and p90 in ms, the ratios, the stall, and the load average before and after.
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time

SYSTEMD_SOCKET = "/run/motor/motor.sock"
DIRECT_SOCKET = "/run/motor-bench-direct.sock"
DIRECT_STATE = "/var/lib/motor-bench-direct"
DIRECT_CONFIG = "/run/motor-bench-direct.conf"
STALL_BURSTS = 11


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def settle(limit_s=300):
    """Waits (at most limit_s) for the 1-minute load average to fall below the CPU count: in the
    nspawn test this runs right after the gate, whose fork bombs leave a load average over 100."""
    deadline = time.monotonic() + limit_s
    while float(loadavg().split()[0]) >= os.cpu_count() and time.monotonic() < deadline:
        time.sleep(5)


def frame(payload):
    data = json.dumps(payload).encode()
    return struct.pack(">I", len(data)) + data


def read_frame(sock):
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("the runner closed the connection")
            buf += chunk
        return buf

    (n,) = struct.unpack(">I", exact(4))
    return json.loads(exact(n))


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(path)
    return s


def status(path, reset=False):
    s = connect(path)
    s.sendall(frame({"id": 1, "method": "runner.status", "params": {"reset_stall": reset}}))
    answer = read_frame(s)
    s.close()
    return answer


def start_direct_runner():
    with open("/etc/motor/motor-runner.conf") as f:
        lines = [l for l in f if not l.split("=")[0].strip() in ("job_backend", "cgroup_parent", "metrics_file")]
    with open(DIRECT_CONFIG, "w") as f:
        f.writelines(lines)
        f.write('job_backend = direct\ncgroup_parent = motor-bench\nmetrics_file = ""\n')
    runner = subprocess.Popen(["/usr/sbin/motor-runner", "serve", "--config", DIRECT_CONFIG, "--state-dir", DIRECT_STATE,
                               "--socket", DIRECT_SOCKET], stdout=subprocess.DEVNULL, stderr=open("/run/motor-bench-direct.log", "w"))
    for _ in range(300):
        try:
            status(DIRECT_SOCKET)
            os.chmod(DIRECT_SOCKET, 0o666)
            return runner
        except OSError:
            time.sleep(0.1)
    runner.kill()
    sys.exit("the direct runner did not listen: " + open("/run/motor-bench-direct.log").read()[-2000:])


def timed(argv):
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - t0) * 1000
    if done.returncode != 0:
        sys.exit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return ms


def burst_stall(path):
    status(path, reset=True)
    clients = [connect(path) for _ in range(20)]
    for i, c in enumerate(clients):
        c.sendall(frame({"id": i, "method": "exec.run", "params": {"command": "echo started; sleep 0.2"}}))
    for c in clients:
        while True:
            f = read_frame(c)
            if f.get("type") == "terminal" or "error" in f:
                break
        c.close()
    result = status(path)["result"]
    return result["loop_worst_stall_us"], result["loop_worst_cpu_us"]


def set_log_level(level, direct_runner):
    """Both runners' log_level (a live key): the packaged one by systemctl reload, the direct one by SIGHUP."""
    for path in ("/etc/motor/motor-runner.conf", DIRECT_CONFIG):
        with open(path) as f:
            lines = [l for l in f if l.split("=")[0].strip() != "log_level"]
        with open(path, "w") as f:
            f.writelines(lines)
            f.write(f"log_level = {level}\n")
    subprocess.run(["systemctl", "reload", "motor-runner"], check=True)
    direct_runner.send_signal(signal.SIGHUP)
    time.sleep(1)


def step_medians(lines):
    """Median us of each start step over the runner's `start steps (us): name N ...` lines (-1: not reached)."""
    per_step = {}
    order = []
    for line in lines:
        if "start steps (us):" not in line:
            continue
        words = line.split("start steps (us):", 1)[1].split()
        for name, value in zip(words[0::2], words[1::2]):
            if name not in per_step:
                per_step[name] = []
                order.append(name)
            if int(value) >= 0:
                per_step[name].append(int(value))
    return [(name, statistics.median(per_step[name])) for name in order if per_step[name]]


def print_steps(way, steps):
    text, last = [], 0
    for name, us in steps:
        text.append(f"{name} {us:.0f} (+{us - last:.0f})")
        last = us
    print(f"{way:8s} start steps, median us since exec.run: " + ", ".join(text))


def start_steps(ways, direct_runner, jobs=20):
    """Where each backend's start goes: `jobs` more runs each with log_level = debug (not timed)."""
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    direct_log_at = os.path.getsize("/run/motor-bench-direct.log")
    set_log_level("debug", direct_runner)
    try:
        for _ in range(jobs):
            timed(ways["systemd"])
            timed(ways["direct"])
        time.sleep(1)
    finally:
        set_log_level("info", direct_runner)
    journal = subprocess.run(["journalctl", "-u", "motor-runner", "--since", since, "-o", "cat", "--no-pager"],
                             capture_output=True, text=True).stdout.splitlines()
    with open("/run/motor-bench-direct.log") as f:
        f.seek(direct_log_at)
        direct = f.read().splitlines()
    print_steps("systemd", step_medians(journal))
    print_steps("direct", step_medians(direct))


def summary(samples):
    s = sorted(samples)
    return statistics.median(s), s[min(len(s) - 1, int(len(s) * 0.9))]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    ways = {
        "systemd": ["motor", "--socket", SYSTEMD_SOCKET, "run", "--no-sync", "--", "/usr/bin/true"],
        "direct": ["motor", "--socket", DIRECT_SOCKET, "run", "--no-sync", "--", "/usr/bin/true"],
        "peer": ["systemd-run", "--wait", "--pipe", "-q", "/usr/bin/true"],
    }
    runner = start_direct_runner()
    try:
        settle()
        print(f"load average before: {loadavg()}")
        names = list(ways)
        samples = {n: [] for n in names}
        for _ in range(3):  # warm-up, not counted
            for n in names:
                timed(ways[n])
        for i in range(rounds):
            for k in range(len(names)):
                n = names[(i + k) % len(names)]
                samples[n].append(timed(ways[n]))
        med = {}
        for n in names:
            med[n], p90 = summary(samples[n])
            print(f"{n:8s} median {med[n]:6.1f} ms  p90 {p90:6.1f} ms  ({rounds} rounds)")
        print(f"systemd/peer {med['systemd'] / med['peer']:.2f}  direct/peer {med['direct'] / med['peer']:.2f}  "
              f"systemd/direct {med['systemd'] / med['direct']:.2f}")
        start_steps(ways, runner)
        stalls = [burst_stall(SYSTEMD_SOCKET) for _ in range(STALL_BURSTS)]
        # Wall: the worst stall other clients saw; CPU: the most CPU time one iteration used (each
        # the worst of its own: where the CPU figure is far below the wall one, the host kept the
        # runner off the CPU for the difference). The worst iteration of a burst varies much from
        # burst to burst: the median of the bursts is the figure, each burst is printed too.
        print("loop worst stall, 20 simultaneous starts on the systemd backend (worst wall / worst CPU of one iteration): "
              + ", ".join(f"{wall / 1000:.1f} / {cpu / 1000:.1f}" for wall, cpu in stalls) + " ms")
        print(f"loop worst stall, median of {len(stalls)} bursts: "
              f"{statistics.median(w for w, _ in stalls) / 1000:.1f} ms wall, {statistics.median(c for _, c in stalls) / 1000:.1f} ms CPU")
        print(f"load average after: {loadavg()}")
    finally:
        runner.terminate()
        runner.wait(timeout=30)


if __name__ == "__main__":
    main()
