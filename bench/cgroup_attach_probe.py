# Times, in a forked child and without strace, the steps of the sandboxed child's
# "child_started -> mounted" span that are no mounts: the three cgroup-v1 attach writes (memory,
# pids, cpuset: src/sandbox/spawn.cpp run_child) and setsid(). GAP=seconds between rounds (0.3
# is one job at a time; 0 lets the kernel's rcu_sync stay warm). Run as root; removes its cgroups.
# Usage: GAP=0.3 python3 bench/cgroup_attach_probe.py [rounds]
import os, time, statistics, sys
N = int(sys.argv[1]) if len(sys.argv) > 1 else 15
name = "motor-attach-probe-%d" % os.getpid()
hier = ["memory", "pids", "cpuset"]
dirs = ["/sys/fs/cgroup/%s/%s" % (h, name) for h in hier]
for d in dirs: os.mkdir(d)
try:
    for f in ("cpuset.cpus", "cpuset.mems"):
        open(dirs[2] + "/" + f, "w").write(open("/sys/fs/cgroup/cpuset/" + f).read())
    res = {k: [] for k in hier + ["setsid"]}
    for i in range(N):
        time.sleep(float(os.environ.get("GAP", "0")))
        r, w = os.pipe()
        fds = [os.open(d + "/cgroup.procs", os.O_WRONLY) for d in dirs]
        pid = os.fork()
        if pid == 0:
            out = []
            for fd in fds:
                t = time.monotonic_ns(); os.write(fd, b"0"); out.append(time.monotonic_ns() - t)
            t = time.monotonic_ns(); os.setsid(); out.append(time.monotonic_ns() - t)
            os.write(w, (" ".join(map(str, out))).encode()); os._exit(0)
        os.close(w)
        vals = list(map(int, os.read(r, 200).split()))
        os.waitpid(pid, 0); os.close(r)
        for fd in fds: os.close(fd)
        for k, v in zip(hier + ["setsid"], vals): res[k].append(v / 1000)
    for k, v in res.items():
        print(f"{k:8s} median {statistics.median(v):8.0f} us  max {max(v):8.0f} us  min {min(v):6.0f} us")
    tot = [sum(res[k][i] for k in hier) for i in range(N)]
    print(f"3 writes median {statistics.median(tot):.0f} us")
finally:
    for d in dirs: os.rmdir(d)
