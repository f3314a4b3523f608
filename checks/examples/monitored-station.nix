# Example: flash-station with monitoring (`services.vllm-station.monitoring`): Prometheus scraping vLLM and
# node_exporter with the alert rules, the synthetic probe every 5 minutes, the engine watchdog, an
# Alertmanager that sends the alerts to a webhook and by e-mail, and the station's Grafana dashboard. checks/test_monitoring_*.py run what it renders with the real programs.
{ lib, ... }:
{
  imports = [ ./flash-station.nix ];

  services.vllm-station.monitoring = {
    enable = true; # thresholds: the recipe's figures (docs/monitoring.md)
    # Where the alerts go: nixpkgs' Alertmanager on loopback, one receiver with both channels.
    alertmanager = {
      enable = true;
      receivers.webhook.url = [ "https://hooks.example.com/vllm-station" ];
      receivers.email = {
        to = "oncall@example.com";
        from = "monitored-station@example.com";
        smarthost = "smtp.example.com:587";
        # `VLLM_STATION_SMTP_PASSWORD=…`, outside the store: nixpkgs' alertmanager unit reads it at start
        authPasswordEnvironmentFile = "/var/lib/vllm-station-secrets/alertmanager-smtp.env";
      };
    };
  };

  # Optional: Grafana on loopback gets the data source and the dashboard provisioned.
  services.grafana = {
    enable = true;
    settings.server.http_addr = "127.0.0.1";
    # A file outside the Nix store (Grafana reads it at start).
    settings.security.secret_key = "$__file{/run/secrets/grafana-secret-key}";
  };
  networking.hostName = lib.mkForce "monitored-station";
}
