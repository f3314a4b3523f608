# VM test of the serving lifecycle (real CI builds and runs it; offline it is only instantiated):
# a stub OpenAI server stands in for vLLM (backend "native"), the real `station` tools run
# prestart and wait-ready. Proves: prestart runs before every start, ready means serving, a killed
# server comes back after RestartSec (60 s), the 4th start within an hour is refused, and the
# journal keeps every try's log. Takes ~4 minutes (three RestartSec waits).
#
#   pkgs.callPackage ./checks/vm/serve.nix { }   or   import ./checks/vm/serve.nix { inherit pkgs; }
{ pkgs, ... }:
let
  stubVllm = pkgs.writeScriptBin "vllm" (
    "#!${pkgs.python3.interpreter}\n" + builtins.readFile ./stub-vllm.py
  );
in
pkgs.testers.runNixOSTest {
  name = "vllm-station-serve";

  nodes.machine = {
    imports = [ ../../modules ];
    services.vllm-station.serve = {
      enable = true;
      backend = "native";
      package = stubVllm;
      model = "stub/model";
      allowHubDownload = true; # the stub serves no checkpoint
      servedModelName = "stub";
      startTimeout = 120;
    };
    environment.systemPackages = [ pkgs.curl ];
  };

  testScript = ''
    import json
    import time

    UNIT = "vllm-station.service"


    def show(prop):
        return machine.succeed(f"systemctl show -p {prop} --value {UNIT}").strip()


    def journal():
        out = machine.succeed(f"journalctl -u {UNIT} -o json --no-pager")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


    def text(entry, field):
        value = entry.get(field, "")
        return value if isinstance(value, str) else bytes(value).decode(errors="replace")


    def invocations(predicate):
        return {e.get("_SYSTEMD_INVOCATION_ID") for e in journal() if predicate(e)}


    def serving(e):
        return "stub-vllm: serving stub" in text(e, "MESSAGE")


    def prestart(e):
        # prestart says so on a machine without NUMA node 1 ("station prestart: NUMA node 1 …");
        # _CMDLINE is there when journald saw the process alive.
        return text(e, "MESSAGE").startswith("station prestart") or " prestart " in text(e, "_CMDLINE")


    machine.wait_for_unit(UNIT)

    with subtest("the unit systemd loaded"):
        assert show("Restart") == "always", show("Restart")
        assert show("RestartUSec") == "1min", show("RestartUSec")
        assert show("StartLimitBurst") == "3", show("StartLimitBurst")
        assert show("StartLimitIntervalUSec") == "1h", show("StartLimitIntervalUSec")
        assert show("TimeoutStartUSec") == "2min", show("TimeoutStartUSec")
        pre = show("ExecStartPreEx")
        assert "prestart" in pre and "flags=privileged" in pre, pre
        assert "wait-ready" in show("ExecStartPostEx")
        assert show("DynamicUser") == "yes"
        assert show("NUMAPolicy") in ("", "default"), show("NUMAPolicy")

    with subtest("active means serving"):
        machine.succeed("curl -sf http://127.0.0.1:8000/health")
        models = json.loads(machine.succeed("curl -sf http://127.0.0.1:8000/v1/models"))
        assert [m["id"] for m in models["data"]] == ["stub"], models
        machine.fail("curl -sf http://127.0.0.1:8000/no-such-endpoint")
        assert len(invocations(prestart)) == 1, "prestart did not run before the first start"

    with subtest("a killed server restarts after RestartSec, not before"):
        first = show("MainPID")
        t0 = time.monotonic()
        machine.succeed(f"kill -9 {first}")
        machine.wait_until_succeeds(f"test $(systemctl show -p SubState --value {UNIT}) = auto-restart", timeout=30)
        machine.sleep(40)
        assert show("SubState") == "auto-restart", f"restarted before RestartSec: {show('SubState')}"
        machine.fail("curl -sf http://127.0.0.1:8000/health")
        machine.wait_until_succeeds(f"test $(systemctl show -p NRestarts --value {UNIT}) = 1", timeout=60)
        machine.wait_for_unit(UNIT, timeout=120)
        assert time.monotonic() - t0 >= 55, "came back faster than RestartSec=60"
        assert show("MainPID") != first
        machine.succeed("curl -sf http://127.0.0.1:8000/health")

    with subtest("the 4th start within an hour is refused"):
        machine.succeed(f"kill -9 {show('MainPID')}")
        machine.wait_until_succeeds(f"test $(systemctl show -p NRestarts --value {UNIT}) = 2", timeout=120)
        machine.wait_for_unit(UNIT, timeout=120)
        machine.succeed(f"kill -9 {show('MainPID')}")
        machine.wait_until_succeeds(
            f"test $(systemctl show -p Result --value {UNIT}) = start-limit-hit", timeout=150
        )
        assert show("ActiveState") == "failed", show("ActiveState")
        machine.fail(f"systemctl start {UNIT}")
        machine.fail("curl -sf http://127.0.0.1:8000/health")

    with subtest("prestart ran before each start; every try's log is kept"):
        served = invocations(serving)
        assert len(served) == 3, f"expected 3 server starts in the journal, got {len(served)}"
        assert invocations(prestart) == served, "a start without its prestart (or a prestart without a start)"
  '';
}
