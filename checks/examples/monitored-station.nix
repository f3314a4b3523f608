# Example: flash-station with monitoring (`services.vllm-station.monitoring`): Prometheus scraping vLLM and
# node_exporter with the alert rules, the synthetic probe every 5 minutes, the engine watchdog, and the
# station's Grafana dashboard. checks/test_monitoring_*.py run what it renders with the real programs.
{ lib, ... }:
{
  imports = [ ./flash-station.nix ];

  services.vllm-station.monitoring.enable = true; # thresholds: the recipe's figures (docs/monitoring.md)

  # Optional: Grafana on loopback gets the data source and the dashboard provisioned.
  services.grafana = {
    enable = true;
    settings.server.http_addr = "127.0.0.1";
    # A file outside the Nix store (Grafana reads it at start).
    settings.security.secret_key = "$__file{/run/secrets/grafana-secret-key}";
  };
  networking.hostName = lib.mkForce "monitored-station";
}
