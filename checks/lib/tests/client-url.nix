# services.vllm-station.serve.clientUrl: how a client on this host reaches vLLM, derived once from
# `host` and `port`, and every consumer following it: the readiness probe, monitoring (scrape target,
# probe, watchdog), golive and the gateway's default upstream.
{ lib, h }:
let
  nginxDefaults = {
    services.nginx.user = "nginx";
    services.nginx.group = "nginx";
    services.nginx.logError = "stderr";
  };
  # serve on `host` (port 8123) with monitoring and golive, and `extra` under services.vllm-station.
  serveOn = host: extra: {
    services.vllm-station = {
      serve = {
        enable = true;
        model = "/var/lib/vllm-station-models/m";
        image = h.image;
        inherit host;
        port = 8123;
        exposeUnauthenticatedVllm = !(builtins.elem host [ "127.0.0.1" "::1" ]);
      };
      monitoring.enable = true;
      golive.enable = true;
    } // extra;
  };
  station =
    host:
    [
      nginxDefaults
      (serveOn host {
        gateway = {
          enable = true;
          serverName = "llm.example.com";
          tls.certificateFile = "/var/lib/gw/fullchain.pem";
          tls.keyFile = "/var/lib/gw/key.pem";
          keys.alice.file = "/run/secrets/alice";
        };
      })
    ];
  # A gateway in front of a station whose vLLM listens on another address is refused (rightly): for
  # those hosts only serve, monitoring and golive are checked.
  withoutGateway = host: [ (serveOn host { }) ];

  baseUrlOf = config: unit: h.flagValue "--base-url" (h.argv config.systemd.services.${unit}.serviceConfig.ExecStart);
  waitReady =
    config:
    h.flagValue "--base-url" (
      h.argv (lib.findFirst (l: lib.hasInfix "wait-ready" l) "" (h.unit config).serviceConfig.ExecStartPost)
    );
  golive =
    config:
    (builtins.fromJSON (builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/golive.json".text))
    .baseUrl;
  scrapeTarget =
    config:
    (lib.findFirst (sc: sc.job_name == "vllm-station") null config.services.prometheus.scrapeConfigs)
    .static_configs;

  follows =
    gateway: url: config:
    let
      address = lib.removePrefix "http://" url;
    in
    h.eq "serve.clientUrl" config.services.vllm-station.serve.clientUrl url
    ++ h.eq "wait-ready" (waitReady config) url
    ++ h.eq "the probe" (baseUrlOf config "vllm-station-probe") url
    ++ h.eq "the watchdog" (baseUrlOf config "vllm-station-watchdog") url
    ++ h.eq "golive.json's baseUrl" (golive config) url
    ++ h.eq "Prometheus' target" (scrapeTarget config) [ { targets = [ address ]; } ]
    ++ lib.optionals gateway (
      h.eq "the gateway's default upstream" (lib.attrNames config.services.nginx.upstreams.vllm_station.servers) [
        address
      ]
    );
in
{
  ipv4-loopback = h.check (station "127.0.0.1") (follows true "http://127.0.0.1:8123");
  # The case the gateway once got wrong (127.0.0.1 while vLLM listened on ::1 only).
  ipv6-loopback = h.check (station "::1") (follows true "http://[::1]:8123");
  ipv4-wildcard-on-loopback = h.check (withoutGateway "0.0.0.0") (follows false "http://127.0.0.1:8123");
  ipv6-wildcard-on-loopback = h.check (withoutGateway "::") (follows false "http://[::1]:8123");
  ipv6-address-in-brackets = h.check (withoutGateway "fd00::5") (follows false "http://[fd00::5]:8123");
  read-only = h.check [
    {
      services.vllm-station.serve = {
        enable = true;
        model = "/m";
        image = h.image;
        clientUrl = "http://elsewhere:1";
      };
    }
  ] (config: h.ok "setting clientUrl is refused" (!(builtins.tryEval config.services.vllm-station.serve.clientUrl).success));
}
