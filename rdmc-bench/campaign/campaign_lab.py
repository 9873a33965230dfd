#!/usr/bin/env python3
"""campaign_lab.py: the fault campaign's lab (see fault_campaign.py).

The network namespaces, veth pairs, bridges, mounts and processes every run
of the campaign uses, and the flip kind's relay. Root only; Python 3
standard library only.
"""

import os
import signal
import subprocess
import sys

NS_PREFIX = "rdfc-h"
PRIVATE_NS = "rdfc-p"
VETH_PREFIX = "rdfc-v"
BRIDGE = "rdfc-br0"
BRIDGE2 = "rdfc-br1"
SUBNET = "10.78.0"
MAX_MEMBERS = 6


def log(*args):
    print("fault_campaign:", *args, file=sys.stderr, flush=True)


def sh(*cmd, check=True):
    """Run a command quietly; raise on failure when check."""
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.returncode


def host_addr(i):
    return f"{SUBNET}.{i + 1}"


# ------------------------------------------------------------------------ lab


class Lab:
    """The namespaces, links, mounts and processes of the campaign."""

    def __init__(self):
        self.procs = []  # Popen objects still to reap
        self.mounts = []
        self.warned_tbf = False

    def up(self):
        self.down()
        sh("ip", "link", "add", BRIDGE, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        sh("ip", "link", "add", BRIDGE2, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        sh("ip", "link", "set", BRIDGE, "up")
        sh("ip", "link", "set", BRIDGE2, "up")
        for i in range(MAX_MEMBERS):
            ns, veth = f"{NS_PREFIX}{i}", f"{VETH_PREFIX}{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", veth, "master", BRIDGE)
            sh("ip", "link", "set", veth, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{host_addr(i)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def reset(self, rate_mbit):
        """Between runs: every host link up, on the main bridge, at rate_mbit."""
        for i in range(MAX_MEMBERS):
            veth = f"{VETH_PREFIX}{i}"
            sh("ip", "link", "set", veth, "master", BRIDGE)
            sh("ip", "link", "set", veth, "up")
            sh("tc", "qdisc", "del", "dev", veth, "root", check=False)
            burst = max(131072, rate_mbit * 1_000_000 // 8 // 500)
            shaped = sh("tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate",
                        f"{rate_mbit}mbit", "burst", str(burst), "latency", "20ms",
                        check=False) == 0
            if not shaped and not self.warned_tbf:
                log("tc tbf is not available: links run unshaped (faults land earlier)")
                self.warned_tbf = True
        sh("ip", "netns", "del", PRIVATE_NS, check=False)

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log(f"process {p.pid} did not die")
        self.procs = []

    def mount_tmpfs(self, path, size):
        os.makedirs(path, exist_ok=True)
        sh("mount", "-t", "tmpfs", "-o", f"size={size}", "rdfc-tmpfs", path)
        self.mounts.append(path)

    def unmount_all(self):
        for m in self.mounts:
            sh("umount", "-l", m, check=False)
        self.mounts = []

    def down(self):
        self.kill_all()
        self.unmount_all()
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(NS_PREFIX) or name == PRIVATE_NS:
                pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                      text=True).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                sh("ip", "netns", "del", name, check=False)
        for link in [BRIDGE, BRIDGE2] + [f"{VETH_PREFIX}{i}" for i in range(MAX_MEMBERS)]:
            sh("ip", "link", "del", link, check=False)


def start_relay(lab, plan, run_dir, flip_rank):
    """A flip run's relay: member flip_rank alone in a private namespace,
    its traffic relayed with one bit flipped; once it is ready."""
    n = plan["members"]
    sh("ip", "netns", "add", PRIVATE_NS)
    sh("ip", "-n", PRIVATE_NS, "link", "set", "lo", "up")
    for r in range(n):
        sh("ip", "-n", PRIVATE_NS, "addr", "add", f"{host_addr(r)}/32", "dev", "lo")
    me = f"{host_addr(flip_rank)}:{plan['port']}"
    peers = ",".join(f"{host_addr(r)}:{plan['port']}" for r in range(n) if r != flip_rank)
    relay_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flip_relay.py")
    relay = lab.spawn([sys.executable, relay_py, f"{NS_PREFIX}{flip_rank}", PRIVATE_NS, me, peers,
                       str(plan["flip_after"]), str(plan["flip_mask"])],
                      stdout=subprocess.PIPE, stderr=open(os.path.join(run_dir, "relay.err"), "w"),
                      text=True)
    line = relay.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError(f"relay did not start (see {run_dir}/relay.err)")
    return relay

