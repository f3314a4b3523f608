# Two-node VM test of services.vllm-station.pair (real CI builds and runs it; offline it is only
# instantiated). `head` and `worker` run the pair on eth1 (their test-network addresses stand in
# for the RoCE rail) with a stub `vllm` (./pair-stub-vllm.py, backend "native"); `outsider` is a
# third machine on the same network. Proves: the head refuses to start without the worker (with a
# message naming the worker's address), the worker starts first and the head then comes up, each
# station's /etc/vllm-station/pair.env holds exactly the declared values and the running process
# has the same environment, the flags of each role, unlimited memlock, the firewall open to the
# peer's rail address only (closed to the third node), the head's start fails on an NCCL socket
# fallback (`station nccl-check` after wait-ready), and the head stops first.
#
#   import ./checks/vm/pair.nix { inherit pkgs; }
{ pkgs, ... }:
let
  stubVllm = pkgs.writeScriptBin "vllm" (
    "#!${pkgs.python3.interpreter}\n" + builtins.readFile ./pair-stub-vllm.py
  );

  station =
    role:
    { nodes, lib, ... }:
    {
      imports = [ ../../modules ];
      services.vllm-station = {
        serve = {
          enable = true;
          backend = "native";
          package = stubVllm;
          model = "stub/model";
          allowHubDownload = true; # the stub serves no checkpoint
          servedModelName = "stub";
        };
        pair = {
          enable = true;
          inherit role;
          headAddress = nodes.head.networking.primaryIPAddress;
          workerAddress = nodes.worker.networking.primaryIPAddress;
          railInterface = "eth1";
          railHca = "mlx5_0";
          workerWaitSeconds = 15;
          headStopWaitSeconds = 60;
          pollSeconds = 1;
        };
      };
      # The test decides the order of starts.
      systemd.services.vllm-station.wantedBy = lib.mkForce [ ];
      networking.firewall.enable = true;
      environment.systemPackages = [
        pkgs.curl
        pkgs.netcat
      ];
    };
in
pkgs.testers.runNixOSTest {
  name = "vllm-station-pair";

  nodes = {
    head = station "head";
    worker = station "worker";
    outsider = {
      environment.systemPackages = [
        pkgs.curl
        pkgs.netcat
      ];
    };
  };

  testScript =
    { nodes, ... }:
    let
      headIp = nodes.head.networking.primaryIPAddress;
      workerIp = nodes.worker.networking.primaryIPAddress;
      common = {
        HEAD_IP = headIp;
        WORKER_IP = workerIp;
        RAIL_IFACE = "eth1";
        RAIL_HCA = "mlx5_0";
        NCCL_SOCKET_IFNAME = "eth1";
        GLOO_SOCKET_IFNAME = "eth1";
        NCCL_IB_HCA = "=mlx5_0";
        NCCL_IB_GID_INDEX = "3";
        NCCL_NET_GDR_LEVEL = "SYS";
        NCCL_DEBUG = "INFO";
      };
      expected = {
        head = common // {
          RANK = "0";
          VLLM_HOST_IP = headIp;
        };
        worker = common // {
          RANK = "1";
          VLLM_HOST_IP = workerIp;
        };
      };
    in
    ''
      import json

      UNIT = "vllm-station.service"
      BEACON = "vllm-station-pair-beacon.service"
      HEAD_IP = "${headIp}"
      WORKER_IP = "${workerIp}"
      EXPECTED = json.loads(${builtins.toJSON (builtins.toJSON expected)})


      def show(machine, prop, unit=UNIT):
          return machine.succeed(f"systemctl show -p {prop} --value {unit}").strip()


      def env_file(machine):
          values = {}
          for line in machine.succeed("cat /etc/vllm-station/pair.env").splitlines():
              if line.strip():
                  key, _, value = line.partition("=")
                  values[key] = value
          return values


      def process_env(machine):
          pid = show(machine, "MainPID")
          raw = machine.succeed(f"tr '\\0' '\\n' < /proc/{pid}/environ")
          values = {}
          for line in raw.splitlines():
              key, sep, value = line.partition("=")
              if sep:
                  values[key] = value
          return values


      def cmdline(machine):
          pid = show(machine, "MainPID")
          return machine.succeed(f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()


      def has_run(argv, run):
          return any(argv[i : i + len(run)] == run for i in range(len(argv)))


      start_all()
      for m in (head, worker, outsider):
          m.wait_for_unit("network-online.target")
      for m in (head, worker):
          m.wait_for_unit("firewall.service")

      with subtest("the env files hold exactly the declared values"):
          for name, machine in (("head", head), ("worker", worker)):
              got = env_file(machine)
              assert got == EXPECTED[name], f"{name}: {got} != {EXPECTED[name]}"
              # Operators source the same file in a shell.
              shell = machine.succeed("set -a; . /etc/vllm-station/pair.env; set +a; echo $RANK,$VLLM_HOST_IP,$NCCL_IB_HCA")
              assert shell.strip() == f"{EXPECTED[name]['RANK']},{EXPECTED[name]['VLLM_HOST_IP']},{EXPECTED[name]['NCCL_IB_HCA']}", shell

      with subtest("the head refuses to start before the worker, naming the worker"):
          head.fail(f"systemctl start {UNIT}")
          head.succeed(f"journalctl -u {UNIT} --no-pager | grep -F 'the worker {WORKER_IP} did not answer'")
          # Restart=always would retry after RestartSec: stop, and reset the failure and the start counter.
          head.succeed(f"systemctl stop {UNIT}; systemctl reset-failed {UNIT}")

      with subtest("worker first, then the head"):
          worker.succeed(f"systemctl start {UNIT}")
          worker.wait_for_unit(BEACON)
          worker.wait_until_succeeds(f"curl -sf http://{WORKER_IP}:29510/ready")
          head.succeed(f"systemctl start {UNIT}")
          head.wait_for_unit(UNIT)
          head.succeed("curl -sf http://127.0.0.1:8000/health")
          head.succeed(f"journalctl -u {UNIT} --no-pager | grep -F 'worker {WORKER_IP} is up'")
          # The worker's stub reaches the head's rendezvous port over the rail.
          worker.wait_until_succeeds(
              f"journalctl -u {UNIT} --no-pager | grep -F 'head rendezvous {HEAD_IP}:29500 reached'", timeout=60
          )

      with subtest("the head's start gate: NCCL must not fall back to sockets"):
          # Ready means serving *over the rail*: nccl-check ran after wait-ready and passed.
          head.succeed(f"journalctl -u {UNIT} --no-pager | grep -F 'PASS    GPUDirect RDMA'")
          head.succeed(f"systemctl stop {UNIT}")
          head.succeed("systemctl set-environment STUB_NCCL=socket")
          head.fail(f"systemctl start {UNIT}")
          head.succeed(f"journalctl -u {UNIT} --no-pager | grep -F 'FAIL    socket fallback'")
          head.succeed(f"systemctl stop {UNIT}; systemctl reset-failed {UNIT}")
          head.succeed("systemctl unset-environment STUB_NCCL")
          head.succeed(f"systemctl start {UNIT}")
          head.wait_for_unit(UNIT)

      with subtest("the running processes have the file's environment"):
          for name, machine in (("head", head), ("worker", worker)):
              env = process_env(machine)
              got = {k: env.get(k) for k in EXPECTED[name]}
              assert got == EXPECTED[name], f"{name} process env: {got}"

      with subtest("flags per role, memlock"):
          h, w = cmdline(head), cmdline(worker)
          for argv, rank in ((h, "0"), (w, "1")):
              assert has_run(argv, ["--tensor-parallel-size", "2"]), argv
              assert has_run(argv, ["--nnodes", "2", "--node-rank", rank, "--master-addr", HEAD_IP, "--master-port", "29500"]), argv
          assert "--headless" in w and "--port" not in w, w
          assert "--headless" not in h and "--port" in h, h
          for machine in (head, worker):
              assert show(machine, "LimitMEMLOCK") == "infinity", show(machine, "LimitMEMLOCK")
              pid = show(machine, "MainPID")
              machine.succeed(f"grep -E '^Max locked memory +unlimited +unlimited' /proc/{pid}/limits")

      with subtest("firewall: the peer's rail address only"):
          # Rendezvous (head) and beacons (both) answer the peer ...
          worker.succeed(f"nc -z -w 3 {HEAD_IP} 29500")
          worker.succeed(f"curl -sf --max-time 3 http://{HEAD_IP}:29510/ready")
          head.succeed(f"curl -sf --max-time 3 http://{WORKER_IP}:29510/ready")
          # ... and nobody else.
          outsider.fail(f"nc -z -w 3 {HEAD_IP} 29500")
          outsider.fail(f"curl -sf --max-time 3 http://{HEAD_IP}:29510/ready")
          outsider.fail(f"curl -sf --max-time 3 http://{WORKER_IP}:29510/ready")
          # NCCL/Gloo/ZeroMQ listen on ephemeral ports: open to the peer, closed to the outsider.
          head.succeed("systemd-run --unit=ephemeral-listener nc -l -k 40000")
          head.wait_for_open_port(40000)
          worker.succeed(f"nc -z -w 3 {HEAD_IP} 40000")
          outsider.fail(f"nc -z -w 3 {HEAD_IP} 40000")
          head.succeed("systemctl stop ephemeral-listener")
          # The worker exposes no API; the head's API stays on loopback (no openFirewall).
          outsider.fail(f"nc -z -w 3 {WORKER_IP} 8000")
          outsider.fail(f"nc -z -w 3 {HEAD_IP} 8000")

      with subtest("the head stops first"):
          worker.succeed(f"systemctl --no-block stop {UNIT}")
          worker.wait_until_succeeds(
              f"journalctl -u {BEACON} --no-pager | grep -F 'waiting for the head {HEAD_IP} to stop first'", timeout=30
          )
          worker.sleep(3)
          assert show(worker, "ActiveState") == "active", "the worker stopped while the head still ran"
          head.succeed(f"systemctl stop {UNIT}")
          worker.wait_until_succeeds(f"test $(systemctl show -p ActiveState --value {UNIT}) = inactive", timeout=60)
          worker.succeed(f"journalctl -u {BEACON} --no-pager | grep -F 'head {HEAD_IP} is down'")
          worker.fail(f"curl -sf --max-time 3 http://{WORKER_IP}:29510/ready")
    '';
}
