# One sandbox for every vllm-station unit, after nixpkgs' prometheus exporters: `base` is the
# strictest set that fits a small Python tool, and each unit asks for the relaxations it needs by
# name. Every relaxation says why. `docs/serve.md` lists each unit's `systemd-analyze security`
# exposure; the system tier checks them against these figures.
#
#   hardening.for [ "gpuDevices" "jit" ]  ==  base // relaxations.gpuDevices // relaxations.jit
#
# Later names win; a relaxation replaces a setting whole (list settings are not appended to).
let
  base = {
    CapabilityBoundingSet = [ "" ];
    DevicePolicy = "closed";
    LockPersonality = true;
    MemoryDenyWriteExecute = true;
    NoNewPrivileges = true;
    PrivateDevices = true;
    PrivateTmp = true;
    PrivateUsers = true;
    ProcSubset = "pid";
    ProtectClock = true;
    ProtectControlGroups = true;
    ProtectHome = true;
    ProtectHostname = true;
    ProtectKernelLogs = true;
    ProtectKernelModules = true;
    ProtectKernelTunables = true;
    ProtectProc = "invisible";
    ProtectSystem = "strict";
    RemoveIPC = true;
    RestrictAddressFamilies = [
      "AF_INET"
      "AF_INET6"
      "AF_UNIX"
    ];
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [
      "@system-service"
      "~@privileged"
    ];
    # A filtered call fails with EPERM (a message from the tool) instead of killing it with SIGSYS.
    SystemCallErrorNumber = "EPERM";
    UMask = "0077";
  };

  relaxations = {
    # ---- vLLM run natively (serve, backend "native") ----
    gpuDevices = {
      PrivateDevices = false; # hides /dev/nvidia*; DeviceAllow keeps only the GPU and RDMA nodes
      DeviceAllow = [
        # CUDA (https://docs.nvidia.com/dgx/pdf/dgx-os-5-user-guide.pdf)
        "char-nvidiactl"
        "char-nvidia-caps"
        "char-nvidia-frontend"
        "char-nvidia-uvm"
        # RDMA (GPUDirect over the ConnectX rails): /dev/infiniband/uverbs*
        "char-infiniband_verbs"
      ];
    };
    jit.MemoryDenyWriteExecute = false; # torch.compile, Triton and the CUDA JIT map generated code executable
    driverProc.ProcSubset = "all"; # NVML and vLLM read /proc/driver/nvidia and /proc/meminfo
    netlink.RestrictAddressFamilies = base.RestrictAddressFamilies ++ [
      "AF_NETLINK" # NCCL, Gloo and ibverbs enumerate interfaces and RDMA links over netlink
    ];
    numaPlacement.SystemCallFilter = [
      "@system-service"
      "@resources" # mbind/set_mempolicy: CUDA and torch place host memory per NUMA node
      "~@privileged"
    ];

    # ---- the docker CLI (serve, runtime "docker"): only a client of dockerd ----
    dockerClient.PrivateUsers = false; # the docker socket belongs to the host's root; a user namespace maps it away

    # ---- podman (serve, runtime "podman"): the runtime itself. The container's processes descend
    # from the unit and inherit its seccomp filter, capability bounding set and namespaces. ----
    containerRuntime = {
      CapabilityBoundingSet = [ ]; # podman needs CAP_SYS_ADMIN & co. to build the container
      DevicePolicy = "auto"; # CDI injects /dev/nvidia* device nodes into the container
      MemoryDenyWriteExecute = false; # inherited by vLLM, whose JITs map generated code executable
      NoNewPrivileges = false; # inherited by the container's entrypoint
      PrivateDevices = false; # the container needs the host's GPU and RDMA device nodes
      PrivateTmp = false; # container storage and mounts must live in the host's mount namespace
      PrivateUsers = false; # podman runs as the host's root to use the system container storage
      ProcSubset = "all"; # inherited: NVML and vLLM read /proc/driver/nvidia
      ProtectClock = false; # implies DeviceAllow=char-rtc, which turns the device policy into an allow-list
      ProtectControlGroups = false; # podman creates the container's cgroup
      ProtectHome = false; # no private mount namespace for the runtime (see PrivateTmp)
      ProtectHostname = false; # the inherited seccomp filter would refuse the container's sethostname
      ProtectKernelLogs = false; # needs a private mount namespace (see PrivateTmp)
      ProtectKernelModules = false; # podman may load overlay/netfilter modules on first use
      ProtectKernelTunables = false; # the runtime writes container sysctls
      ProtectProc = "default"; # needs a private mount namespace (see PrivateTmp)
      ProtectSystem = false; # podman writes /var/lib/containers, /run/containers and /etc/cni
      RestrictAddressFamilies = [ ]; # inherited by NCCL/ibverbs inside the container (netlink, RDMA)
      RestrictNamespaces = false; # the runtime creates the container's namespaces
      SystemCallFilter = [ ]; # podman mounts, pivots and unshares; filters would be inherited too
      UMask = "0022"; # container root filesystems need world-readable files
    };

    # ---- downloads ----
    sharedFiles.UMask = "0022"; # the serving unit (another user, or a container) reads the checkpoint
  };
in
{
  inherit base relaxations;
  for =
    names:
    builtins.foldl' (
      acc: name:
      acc // (relaxations.${name} or (throw "modules/lib/hardening.nix: no relaxation named ${name}"))
    ) base names;
}
