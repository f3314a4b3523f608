"""sitecustomize of the vLLM CPU venv the tests serve with (scripts/setup-vllm installs it there).

On an x86 CPU with AMX (Sapphire Rapids and later), vLLM 0.32's CPU attention kernel for bfloat16
(csrc/cpu/cpu_attn_amx.hpp, chosen when the CPU reports AMX tiles) executes AMX instructions without
asking Linux for the AMX tile state first (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, which
Linux requires of every process since 5.16). oneDNN asks when its own AMX kernels run, so a process whose
first forward pass has a long enough prompt gets the permission by luck; one whose first request is a
single token (`station wait-ready`'s probe) dies with SIGILL in the engine's worker ("Worker proc
VllmWorker-0 died unexpectedly (exit code: -4)"), seen on these machines. Every process of this venv asks
here, before anything else runs; where the CPU has no AMX the call fails and nothing changes.
(torch has the same call, `torch._C._cpu._init_amx()`; importing torch at every interpreter start costs
seconds, the system call nothing.)
"""

import ctypes
import platform

SYS_ARCH_PRCTL = 158  # x86_64
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

if platform.machine() == "x86_64":
    try:
        ctypes.CDLL(None, use_errno=True).syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    except (OSError, AttributeError):  # no libc symbol: nothing to ask
        pass
