# The day2 tier's station (checks/test_day2.py): every feature of the project enabled together on one
# machine, as an operator would run them — serve (checks/examples/cpu-station.nix, imported as it is),
# download (from the test's local hub) and verify, the gateway, monitoring (Prometheus, Alertmanager with a
# webhook receiver, node_exporter, the probe and the watchdog) and golive.
#
# Scaled for a test (each stated; nothing else differs from what an operator writes):
#   - RestartSec 2 s instead of 60 s (the start limit stays 3 starts an hour);
#   - the watchdog looks every 3 s and restarts after 2 wedge verdicts (default: 30 s, 3);
#   - the probe runs every 30 s (the least the module accepts; default 300 s);
#   - golive's gates sized for a 4 M-parameter model on 2 CPU cores: smoke (its tool call included) and a
#     bench of 2 requests of 16 tokens at 1 user, judged by `failures==0` and a floor of 1 tok/s; no
#     needles (a 2,048-token context), no agent battery and no 40-case tool battery (the small model
#     fails 6 of its cases: a capability of the model, not of the station).
{ lib, ... }:
let
  model = "/var/lib/vllm-station-models/tiny-tools";
in
{
  # The CPU example as an operator writes it (vLLM's CPU build serving the small tool-calling model):
  # this tier is its proof under systemd too — the rendered command line vLLM accepts, readiness, smoke.
  imports = [ ../examples/cpu-station.nix ];

  services.vllm-station = {
    serve = {
      # The station's own key: the serving unit, the gateway, the probe, the watchdog and golive read it.
      # In the persistent, root-only secrets directory (docs/secrets.md): it outlives a reboot.
      apiKeyFile = "/var/lib/vllm-station-secrets/vllm-api-key";
      # Not the example's 8899: the system tier's cpu-station may run beside this one on the host's network.
      port = lib.mkForce 8898;
    };

    download = {
      enable = true;
      models.tiny-tools = {
        model = "local/tiny-tools";
        revision = "5d0c1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d";
        dir = model;
      };
    };

    gateway = {
      enable = true;
      serverName = "llm.day2.test";
      host = "127.0.0.1";
      port = 8443;
      # nginx reads these itself (as user nginx): a directory of group nginx, as docs/gateway.md says.
      tls.certificateFile = "/var/lib/vllm-station-gateway/fullchain.pem";
      tls.keyFile = "/var/lib/vllm-station-gateway/key.pem";
      keys.alice.file = "/var/lib/vllm-station-secrets/gateway/alice";
    };

    monitoring = {
      enable = true;
      probe.interval = 30;
      watchdog = {
        interval = 3;
        probeTimeout = 2;
        wedgeVerdicts = 2;
      };
      alertmanager = {
        enable = true;
        # The test's webhook receiver (its port is chosen at run time: the test points this URL there).
        receivers.webhook.url = [ "http://127.0.0.1:9/day2-webhook" ];
      };
    };

    golive = {
      enable = true;
      skip = [
        "needle"
        "agent"
        "tools"
      ];
      expect = [ "c1.tok_s>=1" ];
      bench = {
        concurrency = [ 1 ];
        requests = "2";
        outputLen = 16;
      };
      requestTimeout = 120;
    };
  };

  systemd.services.vllm-station.serviceConfig.RestartSec = lib.mkForce 2;

  networking.hostName = lib.mkForce "day2-station";
}
