# services.vllm-station.stationListener: the station end of the link from a gateway on another host.
# vLLM stays on loopback; a minimal nixpkgs nginx server listens on the station's private (rail)
# address with TLS, accepts only clients that present a certificate of the gateways' CA (mutual TLS),
# and proxies to vLLM's loopback port. The firewall opens that port to the declared gateway
# addresses only, for both of NixOS's firewall backends. The gateway's end is
# `services.vllm-station.gateway.stationTls` (modules/gateway.nix).
#
# What this module owns:
#   services.nginx.virtualHosts.vllm-station-listener   the TLS server (nothing else of nginx)
#   networking.firewall.extraCommands / extraInputRules  `port` from each of `gateways`, nothing more
{
  config,
  lib,
  utils,
  ...
}:
let
  inherit (lib)
    mkOption
    mkEnableOption
    types
    concatMapStringsSep
    ;

  cfg = config.services.vllm-station.stationListener;
  serve = config.services.vllm-station.serve;
  contract = import ./lib/contract.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };

  vhost = "vllm-station-listener";
  accessLog = "/var/log/nginx/vllm-station-listener.log";

  inherit (contract) isLoopback;
  isIPv6 = a: lib.hasInfix ":" a;
  # An address or a network: the firewall compares sources, it resolves no names.
  isSource =
    a:
    builtins.match "[0-9]{1,3}([.][0-9]{1,3}){3}(/[0-9]{1,2})?" a != null
    || builtins.match "[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*(/[0-9]{1,3})?" a != null;
  inherit (unit) isSecretPath;
  open = !isLoopback cfg.host;

  # iptables: one rule a source, built from a list and escaped. The 24.11 iptables firewall has no
  # declarative option for a port open to some sources only (allowedTCPPorts opens it to all), so the
  # rules go to `extraCommands`, as data: no shell logic. They need no `extraStopCommands`: the
  # firewall's start (and reload) flushes the nixos-fw chain they are appended to.
  iptablesRules = lib.concatMapStrings (
    source:
    lib.escapeShellArgs [
      (if isIPv6 source then "ip6tables" else "iptables")
      "-w"
      "-A"
      "nixos-fw"
      "-p"
      "tcp"
      "-s"
      source
      "--dport"
      (toString cfg.port)
      "-j"
      "nixos-fw-accept"
    ]
    + "\n"
  ) cfg.gateways;
  # nftables: the declarative `extraInputRules` of the input-allow chain.
  nftablesRules =
    let
      rule =
        family: sources:
        lib.optionalString (sources != [ ]) ''
          ${family} saddr { ${lib.concatStringsSep ", " sources} } tcp dport ${toString cfg.port} accept comment "vllm-station listener: gateways"
        '';
    in
    rule "ip" (lib.filter (a: !isIPv6 a) cfg.gateways) + rule "ip6" (lib.filter isIPv6 cfg.gateways);

  listenAddr = if isIPv6 cfg.host && !lib.hasPrefix "[" cfg.host then "[${cfg.host}]" else cfg.host;
  vllmUrl = serve.clientUrl; # this station's vLLM as a client on this host reaches it
  # The gateway's own answer for a drained station (one text: modules/gateway/errors.json).
  drainBody = builtins.toJSON {
    error = (lib.importJSON ./gateway/errors.json)."503-draining" // {
      param = null;
    };
  };
in
{
  options.services.vllm-station.stationListener = {
    enable = mkEnableOption ''
      a TLS listener for gateways on other hosts: nginx on `host`:`port` with mutual TLS, in front of
      this station's vLLM on loopback, reachable from `gateways` only'';

    host = mkOption {
      type = types.str;
      default = "127.0.0.1";
      example = "10.10.0.2";
      description = ''
        Address to listen on: the station's private (rail) address that the gateways reach. On
        loopback, only this host's own gateway reaches it (then `gateways` may be empty).
      '';
    };

    port = mkOption {
      type = types.port;
      default = 8443;
      description = "TLS port of the listener (vLLM's own port stays on loopback).";
    };

    gateways = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "10.10.0.1" ];
      description = ''
        Addresses (or networks, `10.10.0.0/30`) of the gateway hosts. The firewall opens `port` to
        these sources only — `networking.firewall.extraCommands` (iptables) or `extraInputRules`
        (nftables) — and nginx refuses any other client address (403).
      '';
    };

    tls = {
      certificateFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-listener/fullchain.pem";
        description = ''
          The station's certificate chain (PEM), outside the Nix store. It must name the gateways'
          `gateway.stationTls.serverName` (nginx verifies one name for every station of a gateway).
        '';
      };
      keyFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-listener/key.pem";
        description = "Private key (PEM) of `certificateFile`, outside the Nix store, readable by nginx's user.";
      };
      clientCaFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-listener/gateways-ca.pem";
        description = ''
          CA certificate(s) (PEM) that signed the gateways' client certificates
          (`gateway.stationTls.certificateFile`): `ssl_verify_client on`, a client without one gets 400.
        '';
      };
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = serve.enable && !serve.headless;
        message = "services.vllm-station.stationListener: there is no API to listen for; enable services.vllm-station.serve (not headless) on this station, or set stationListener.enable = false.";
      }
      {
        assertion = !open || cfg.gateways != [ ];
        message = "services.vllm-station.stationListener: listening on ${cfg.host} with no gateways; set stationListener.gateways = [ \"<each gateway host's address>\" ] (the firewall opens port ${toString cfg.port} to those only).";
      }
      {
        assertion = lib.all isSource cfg.gateways;
        message = "services.vllm-station.stationListener.gateways: IP addresses or networks only, the firewall resolves no names (got ${
          lib.concatStringsSep ", " (lib.filter (a: !isSource a) cfg.gateways)
        }).";
      }
      {
        assertion = !open || config.networking.firewall.enable;
        message = "services.vllm-station.stationListener: networking.firewall.enable is false, so every host reaches port ${toString cfg.port}; set networking.firewall.enable = true (the listener's port is opened to `gateways` only).";
      }
      {
        assertion = cfg.tls.certificateFile != null && cfg.tls.keyFile != null && cfg.tls.clientCaFile != null;
        message = "services.vllm-station.stationListener.tls: set certificateFile, keyFile (this station's certificate) and clientCaFile (the CA of the gateways' client certificates).";
      }
      {
        assertion = lib.all isSecretPath (lib.filter (p: p != null) [ cfg.tls.keyFile ]);
        message = "services.vllm-station.stationListener.tls.keyFile must be an absolute path outside the Nix store (the store is world-readable).";
      }
      {
        assertion = !(config.services.vllm-station.gateway.enable && config.services.vllm-station.gateway.port == cfg.port && config.services.vllm-station.gateway.host == cfg.host);
        message = "services.vllm-station.stationListener: port ${toString cfg.port} on ${cfg.host} is the gateway's; set stationListener.port to another port.";
      }
    ];

    services.nginx = {
      enable = true;
      virtualHosts.${vhost} = {
        serverName = vhost;
        listen = [
          {
            addr = listenAddr;
            inherit (cfg) port;
            ssl = true;
          }
        ];
        onlySSL = true;
        sslCertificate = cfg.tls.certificateFile;
        sslCertificateKey = cfg.tls.keyFile;
        extraConfig = ''
          access_log ${accessLog};
          # Mutual TLS: only the gateways' certificates get through.
          ssl_client_certificate ${cfg.tls.clientCaFile};
          ssl_verify_client on;
          ${concatMapStringsSep "\n" (a: "allow ${a};") (cfg.gateways ++ lib.optionals (!open) [ "127.0.0.1" "::1" ])}
          deny all;
        '';
        locations."@vllm_station_drained".extraConfig = ''
          default_type application/json;
          add_header Retry-After 10 always;
          return 503 '${drainBody}';
        '';
        locations."/".extraConfig = ''
          # Drained (`station drain`) or stopping (the serving unit's first stop step): new requests get
          # 503, those in flight finish; the gateways send GETs elsewhere (proxy_next_upstream http_503).
          error_page 503 @vllm_station_drained;
          if (-f ${contract.drainFlag}) {
            return 503;
          }
          if (-f ${contract.stoppingFlag}) {
            return 503;
          }
          # The gateway chose the path, checked the client's key and limits; it sends the station's key
          # (gateway.upstreamApiKeyFile), which vLLM checks on /v1.
          proxy_pass ${vllmUrl};
          proxy_http_version 1.1;
          proxy_set_header Connection "";
          proxy_set_header Host $proxy_host;
          # Streams both ways, nothing written to disk: the gateway bounded the body already.
          client_max_body_size 0;
          proxy_request_buffering off;
          proxy_buffering off;
          proxy_read_timeout 3600s;
          proxy_send_timeout 3600s;
        '';
      };
    };

    networking.firewall = lib.mkIf open (
      if config.networking.nftables.enable or false then
        { extraInputRules = nftablesRules; }
      else
        { extraCommands = iptablesRules; }
    );
  };
}
