"""Fake GPU nodes on disk: a folder standing in for / (device nodes, /proc, /sys, /etc) and a
bin folder with an `nvidia-smi` and a `dmesg` that print the samples of tests/node_samples.py
exactly as the real tools print them (stdout, stderr, exit status per query).

The probe reads the stand-in root only when the controller sends it (local host, with
ENVDOCTOR_TEST_ROOT in the controller's environment) and its own environment names the same
folder; `node_env` gives both, and PATH with the fakes first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests.node_samples import Gpu, Host, Outputs, outputs_of

FAKE_SMI = r"""#!/bin/sh
# A stand-in for nvidia-smi: prints what a real one printed for the same query, from files.
d="$(dirname "$0")/smi"
case "$*" in
  "-q -x") key=xml ;;
  --query-compute-apps=*) key=apps ;;
  "topo -m") key=topo ;;
  "-L") key=list ;;
  *) echo "fake nvidia-smi: no sample for: $*" >&2; exit 2 ;;
esac
[ -f "$d/$key.out" ] && cat "$d/$key.out"
[ -f "$d/$key.err" ] && cat "$d/$key.err" >&2
exit "$(cat "$d/$key.status")"
"""
FAKE_DMESG = """#!/bin/sh
cat "$(dirname "$0")/smi/dmesg.out"
"""
LIMITS = """Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max data size             unlimited            unlimited            bytes     
Max stack size            8388608              unlimited            bytes     
Max core file size        0                    unlimited            bytes     
Max resident set          unlimited            unlimited            bytes     
Max processes             2062591              2062591              processes 
Max open files            {nofile:<20} {nofile:<20} files     
Max locked memory         {memlock:<20} {memlock:<20} bytes     
Max address space         unlimited            unlimited            bytes     
Max file locks            unlimited            unlimited            locks     
Max pending signals       2062591              2062591              signals   
"""  # /proc/self/limits as the kernel prints it (fs/proc/base.c: proc_pid_limits)


@dataclass(frozen=True)
class FakeNode:
    root: Path
    bin: Path

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        for name in list(env):
            if name.startswith(("NCCL_", "GLOO_")) or name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                                                                 "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"):
                del env[name]
        env["ENVDOCTOR_TEST_ROOT"] = str(self.root)
        env["PATH"] = f"{self.bin}:/usr/bin:/bin"
        return env


def write(path: Path, text: str, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def fake_node(folder: Path, gpus: list[Gpu], host: Host | None = None, outputs: Outputs | None = None,
              *, smi: bool = True) -> FakeNode:
    """A node with `gpus` (nvidia-smi printing `outputs`, by default those of the GPUs) and
    the host facts of `host`."""
    host = host or Host()
    outputs = outputs or outputs_of(gpus)
    root, bin_dir = folder / "root", folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if smi:
        write(bin_dir / "nvidia-smi", FAKE_SMI, 0o755)
        for key, (out, err, status) in (("xml", outputs.xml), ("apps", outputs.apps), ("topo", outputs.topo),
                                         ("list", outputs.listing)):
            write(bin_dir / "smi" / f"{key}.out", out)
            write(bin_dir / "smi" / f"{key}.err", err)
            write(bin_dir / "smi" / f"{key}.status", f"{status}\n")
    write(bin_dir / "dmesg", FAKE_DMESG, 0o755)
    write(bin_dir / "smi" / "dmesg.out", outputs.dmesg)
    names = list(host.devices) + ([f"nvidia{g.index}" for g in gpus] if gpus else [])
    (root / "dev" / "shm").mkdir(parents=True, exist_ok=True)
    for name in names:
        write(root / "dev" / name, "")
    if gpus or host.devices:
        write(root / "proc" / "driver" / "nvidia" / "version",
              "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n")
        (root / "sys" / "module" / "nvidia").mkdir(parents=True, exist_ok=True)
    if host.uvm_loaded:
        (root / "sys" / "module" / "nvidia_uvm").mkdir(parents=True, exist_ok=True)
    for i in range(host.nvswitches):
        write(root / "proc" / "driver" / "nvidia-nvswitch" / "devices" / f"0000:0{i}:00.0", "")
    write(root / "proc" / "self" / "mounts", "overlay / overlay rw,relatime 0 0\n"
          f"shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,{host.shm_size} 0 0\n" if host.shm_size else
          "overlay / overlay rw,relatime 0 0\n")
    write(root / "proc" / "self" / "limits", LIMITS.format(nofile=host.nofile, memlock=host.memlock))
    for name, state in host.interfaces.items():
        write(root / "sys" / "class" / "net" / name / "operstate", state + "\n")
    for hca in host.hcas:
        write(root / "sys" / "class" / "infiniband" / hca / "ports" / "1" / "state", "4: ACTIVE\n")
        write(root / "sys" / "class" / "infiniband" / hca / "ports" / "1" / "link_layer", "InfiniBand\n")
    if host.nccl_conf is not None:
        write(root / "etc" / "nccl.conf", host.nccl_conf)
    write(root / "etc" / "passwd", "".join(f"{name}:x:{uid}:{uid}::/home/{name}:/bin/bash\n"
                                           for uid, name in host.users.items()))
    for pid, (uid, cmdline) in host.processes.items():
        write(root / "proc" / str(pid) / "status", f"Name:\tpython3\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        write(root / "proc" / str(pid) / "cmdline", cmdline.replace(" ", "\0") + "\0")
        write(root / "proc" / str(pid) / "comm", "python3\n")
    if host.fabric_manager_pid is not None:
        write(root / "proc" / str(host.fabric_manager_pid) / "comm", "nv-fabricmanage\n")  # comm keeps 15 characters
    if host.cuda:
        cuda_toolkit(root / "usr" / "local" / "cuda", host.cuda)
    return FakeNode(root, bin_dir)


NVCC_VERSION = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Fri_Feb_21_20:23:50_PST_2025
Cuda compilation tools, release {release}, V{release}.93
Build cuda_{release}.r{release}/compiler.35583870_0
"""  # nvcc --version as CUDA 12.x prints it


def cuda_toolkit(home: Path, release: str) -> Path:
    """A CUDA toolkit's layout: bin/nvcc answering --version, and the headers the JITs include."""
    write(home / "bin" / "nvcc", "#!/bin/sh\ncat <<'EOF'\n" + NVCC_VERSION.format(release=release) + "EOF\n", 0o755)
    for header in ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda.h"):
        write(home / "include" / header, "/* header */\n")
    return home
