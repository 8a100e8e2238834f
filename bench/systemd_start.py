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
# Then the loop's worst stall (runner.status loop_worst_stall_us, reset first) while 20 clients
# each start `echo started; sleep 0.2` at once on the systemd backend.
# Prints medians and p90 in ms, the ratios, the stall, and the load average before and after.
import json
import os
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


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


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
    return status(path)["result"]["loop_worst_stall_us"]


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
        stalls = [burst_stall(SYSTEMD_SOCKET) for _ in range(3)]
        print(f"loop worst stall, 20 simultaneous starts on the systemd backend: {', '.join(f'{s / 1000:.1f}' for s in stalls)} ms")
        print(f"load average after: {loadavg()}")
    finally:
        runner.terminate()
        runner.wait(timeout=30)


if __name__ == "__main__":
    main()
