# Module tests of services.vllm-station.gateway (tier nix_lib): what the module hands nixpkgs' nginx
# module and its own unit, for every option, and every assertion. lib.evalModules with the option
# stubs of checks/lib/harness.nix (services.nginx is a loose stub there: how nixpkgs renders these
# values, and what a real nginx makes of them, is checks/test_gateway.py's part).
#
#   nix-instantiate --eval --strict --json checks/gateway/module.nix --argstr nixpkgsLib "$NIXPKGS_LIB"
#   … --argstr output names      # the test names, without running them
#   … --argstr only acme --show-trace
#
# Result: { passed = [ names ]; failed = [ { name; message; } ]; } (checks/lib's shape).
{
  nixpkgsLib ? builtins.getEnv "NIXPKGS_LIB",
  lib ? import (nixpkgsLib + "/lib"),
  only ? null,
  output ? "results",
}:
let
  h = import ../lib/harness.nix { inherit lib; };

  # What nixpkgs' nginx module would provide (the stub has no defaults).
  nginxDefaults = {
    services.nginx.user = "nginx";
    services.nginx.group = "nginx";
    services.nginx.logError = "stderr";
  };
  base = {
    services.vllm-station.serve = {
      enable = true;
      model = "/var/lib/vllm-station-models/m";
      image = h.image;
    };
    services.vllm-station.gateway = {
      enable = true;
      serverName = "llm.example.com";
      tls.certificateFile = "/var/lib/gw/fullchain.pem";
      tls.keyFile = "/var/lib/gw/key.pem";
      keys.alice.file = "/run/secrets/alice";
    };
  };
  with' = extra: [
    nginxDefaults
    base
    { services.vllm-station.gateway = extra; }
  ];
  withServe = extra: [
    nginxDefaults
    base
    { services.vllm-station.serve = extra; }
  ];

  stationTls = {
    enable = true;
    caFile = "/var/lib/gw/stations-ca.pem";
    serverName = "stations.internal";
    certificateFile = "/var/lib/gw/client.pem";
    keyFile = "/var/lib/gw/client-key.pem";
  };
  # A station behind a remote gateway: vLLM on loopback, the listener on its rail address.
  listener = extra: [
    nginxDefaults
    {
      services.vllm-station.serve = {
        enable = true;
        model = "/var/lib/vllm-station-models/m";
        image = h.image;
        port = 8888;
      };
      services.vllm-station.stationListener = {
        enable = true;
        host = "10.0.0.2";
        gateways = [ "10.0.0.1" "fd00::1" ];
        tls = {
          certificateFile = "/var/lib/l/cert.pem";
          keyFile = "/var/lib/l/key.pem";
          clientCaFile = "/var/lib/l/gateways-ca.pem";
        };
      };
      networking.firewall.enable = true;
    }
    { services.vllm-station.stationListener = extra; }
  ];
  listenerVhost = config: config.services.nginx.virtualHosts.vllm-station-listener;

  gw = config: config.services.nginx;
  vhost = config: (gw config).virtualHosts.vllm-station-gateway;
  location = name: config: (vhost config).locations.${name}.extraConfig or "<no location ${name}>";
  keysUnit = config: config.systemd.services.vllm-station-gateway-keys;
  keysArgv = config: h.argv (keysUnit config).serviceConfig.ExecStart;
  has = what: text: part: h.ok "${what}: `${part}` not in:\n${text}" (lib.hasInfix part text);
  lacks = what: text: part: h.ok "${what}: `${part}` must not be in:\n${text}" (!lib.hasInfix part text);
in
let
  tests = {
    import-enables-nothing = h.check [ nginxDefaults ] (
      config:
      h.eq "nginx" ((gw config).enable or false) false
      ++ h.eq "units" (lib.attrNames config.systemd.services) [ ]
    );

    defaults = h.check (with' { }) (
      config:
      let
        v = vhost config;
        group = location "^~ /_vllm_station/default/" config;
      in
      h.eq "nginx enabled" (gw config).enable true
      ++ h.eq "listen" v.listen [
        {
          addr = "0.0.0.0";
          port = 443;
          ssl = true;
        }
      ]
      ++ h.eq "onlySSL" v.onlySSL true
      ++ h.eq "forceSSL" v.forceSSL false
      ++ h.eq "enableACME" v.enableACME false
      ++ h.eq "certificate" [ v.sslCertificate v.sslCertificateKey ] [
        "/var/lib/gw/fullchain.pem"
        "/var/lib/gw/key.pem"
      ]
      ++ h.eq "locations" (lib.attrNames v.locations) [
        "/"
        "= /_vllm_station/error/400"
        "= /_vllm_station/error/401"
        "= /_vllm_station/error/403"
        "= /_vllm_station/error/403-operator"
        "= /_vllm_station/error/404"
        "= /_vllm_station/error/405"
        "= /_vllm_station/error/413"
        "= /_vllm_station/error/414"
        "= /_vllm_station/error/429"
        "= /_vllm_station/error/500"
        "= /_vllm_station/error/501"
        "= /_vllm_station/error/502"
        "= /_vllm_station/error/503"
        "= /_vllm_station/error/503-draining"
        "= /_vllm_station/error/504"
        "= /_vllm_station/error/505"
        "= /health"
        "= /tokenize"
        "= /v1/chat/completions"
        "= /v1/completions"
        "= /v1/models"
        "= /version"
        "^~ /_vllm_station/default/"
      ]
      ++ has "errors before a location: exact URIs" (vhost config).extraConfig "error_page 400 /_vllm_station/error/400;"
      ++ has "nginx's 494 as a JSON 400" (vhost config).extraConfig "error_page 494 =400 /_vllm_station/error/400;"
      ++ has "a fixed path to the station" group "proxy_pass http://vllm_station$vllm_station_path;"
      ++ has "the path is the location's literal" (location "= /v1/models" config) "set $vllm_station_path /v1/models;"
      ++ has "bodies in memory up to the limit" group "client_body_buffer_size 32m;"
      ++ has "health: a fixed URI" (location "= /health" config) "set $vllm_station_path /health;"
      ++ has "health: GET/HEAD" (location "= /health" config) "if ($request_method !~ ^(GET|HEAD)$)"
      ++ has "health: no body sent on" (location "= /health" config) "proxy_pass_request_body off;"
      ++ has "health: its own rate" (location "= /health" config) "limit_req zone=vllm_station_health burst=10 nodelay;"
      ++ has "tokenize: operators only" (location "= /tokenize" config) "if ($vllm_station_role != operator)"
      ++ lacks "models: any key's role" (location "= /v1/models" config) "vllm_station_role"
      ++ has "keys: one hash map" (gw config).commonHttpConfig "map $vllm_station_token $vllm_station_entry {"
      ++ lacks "no operator key, no operator entry" (gw config).commonHttpConfig " operator;\n"
      ++ h.eq "everything else" v.locations."/".return "404"
      ++ has "1M-token body" group "client_max_body_size 32m;"
      ++ has "rate" group "limit_req zone=vllm_station_rate_default burst=50 nodelay;"
      ++ has "concurrency" group "limit_conn vllm_station_conn_default 64;"
      ++ has "unbuffered" group "proxy_buffering off;"
      ++ has "the hour-long read" group "proxy_read_timeout 3600s;"
      ++ has "least-conn" (gw config).upstreams.vllm_station.extraConfig "least_conn;"
      ++ h.eq "the local station" (gw config).upstreams.vllm_station.servers {
        "127.0.0.1:8000" = {
          weight = 1;
          max_fails = 1;
          fail_timeout = "30s";
        };
      }
      ++ h.eq "no affinity pool" ((gw config).upstreams ? vllm_station_affinity) false
      ++ has "zones" (gw config).commonHttpConfig "limit_req_zone $vllm_station_key zone=vllm_station_rate_default:1m rate=10r/s;"
      ++ lacks "no Authorization in the log" (gw config).commonHttpConfig "$http_authorization\""
      ++ h.eq "firewall" (config.networking.firewall.allowedTCPPorts or [ ]) [ ]
    );

    keys-unit = h.check (with' { keys.bob.file = "/run/secrets/bob"; }) (
      config:
      let
        u = keysUnit config;
      in
      # wanted, not required, by nginx: a restart of this unit (a rotation) is not a restart of nginx
      h.eq "ordering" [ u.before u.wantedBy u.partOf (u.requiredBy or [ ]) ] [
        [ "nginx.service" ]
        [ "nginx.service" ]
        [ "nginx.service" ]
        [ ]
      ]
      # after the maps are written: nginx reloads if it runs (root's call; never blocks on nginx's job)
      ++ h.eq "reload" u.serviceConfig.ExecStartPost
        ''+"/nix/store/00000000000000000000000000000000-systemd/bin/systemctl" "--no-block" "try-reload-or-restart" "nginx.service"''
      ++ h.eq "config changes reload nginx" (config.services.nginx.enableReload or null) true
      # the key files are checked first, each named by its option
      ++ h.eq "secrets check" [ u.requires u.after ] [
        [ "vllm-station-secrets@vllm-station-gateway-keys.service" ]
        [ "vllm-station-secrets@vllm-station-gateway-keys.service" ]
      ]
      ++ h.eq "secrets" config.services.vllm-station.secrets.units.vllm-station-gateway-keys [
        {
          option = "services.vllm-station.gateway.keys.alice.file";
          path = "/run/secrets/alice";
          kind = "file";
        }
        {
          option = "services.vllm-station.gateway.keys.bob.file";
          path = "/run/secrets/bob";
          kind = "file";
        }
      ]
      ++ h.eq "user" [ u.serviceConfig.User u.serviceConfig.Group ] [ "nginx" "nginx" ]
      ++ h.eq "oneshot" [ u.serviceConfig.Type u.serviceConfig.RemainAfterExit ] [ "oneshot" true ]
      ++ h.eq "a failed restart keeps the last maps" u.serviceConfig.RuntimeDirectoryPreserve true
      ++ h.eq "credentials" u.serviceConfig.LoadCredential [
        "key-alice:/run/secrets/alice"
        "key-bob:/run/secrets/bob"
      ]
      ++ h.eq "argv" (keysArgv config) [
        "/nix/store/00000000000000000000000000000000-vllm-station/bin/station"
        "gateway"
        "keys"
        "--output"
        "/run/vllm-station-gateway/keys.map"
        "--upstream-out"
        "/run/vllm-station-gateway/upstream-authorization.map"
        "--key"
        "alice=%d/key-alice"
        "--key"
        "bob=%d/key-bob"
      ]
      ++ h.eq "sandboxed" [ u.serviceConfig.ProtectSystem u.serviceConfig.CapabilityBoundingSet ] [
        "strict"
        [ "" ]
      ]
    );

    keys-directory-and-station-key = h.check (
      with' { keysDirectory = "/run/secrets/gateway-keys"; }
      ++ [ { services.vllm-station.serve.apiKeyFile = "/run/secrets/vllm"; } ]
    ) (
      config:
      h.eq "credentials" (keysUnit config).serviceConfig.LoadCredential [
        "key-alice:/run/secrets/alice"
        "keydir:/run/secrets/gateway-keys"
        "upstream-key:/run/secrets/vllm"
      ]
      ++ h.eq "argv" (lib.drop 9 (keysArgv config)) [
        "--key-dir"
        "%d/"
        "--prefix"
        "keydir_"
        "--upstream-key-file"
        "%d/upstream-key"
      ]
      # the stations' key is this station's: its rotation (a restart of the serving unit) re-reads it
      ++ h.eq "follows the station key" [ (keysUnit config).partOf (keysUnit config).wantedBy ] [
        [ "nginx.service" "vllm-station.service" ]
        [ "nginx.service" "vllm-station.service" ]
      ]
      ++ h.eq "secrets" (map (x: [ x.option x.kind ]) config.services.vllm-station.secrets.units.vllm-station-gateway-keys) [
        [ "services.vllm-station.gateway.keys.alice.file" "file" ]
        [ "services.vllm-station.gateway.keysDirectory" "directory" ]
        [ "services.vllm-station.gateway.upstreamApiKeyFile" "file" ]
      ]
    );

    acme = h.check (
      with' {
        tls.acme = true;
        tls.certificateFile = lib.mkForce null;
        tls.keyFile = lib.mkForce null;
        openFirewall = true;
      }
    ) (
      config:
      let
        v = vhost config;
      in
      h.eq "enableACME" v.enableACME true
      ++ h.eq "forceSSL: port 80 answers the challenge and redirects" v.forceSSL true
      ++ h.eq "onlySSL" v.onlySSL false
      ++ h.eq "listen" v.listen [
        {
          addr = "0.0.0.0";
          port = 443;
          ssl = true;
        }
        {
          addr = "0.0.0.0";
          port = 80;
        }
      ]
      ++ h.eq "no certificate files" (v ? sslCertificate) false
      ++ h.eq "firewall" config.networking.firewall.allowedTCPPorts [
        443
        80
      ]
    );

    per-key-limits = h.check (
      with' {
        keys.batch = {
          file = "/run/secrets/batch";
          limits = {
            connections = 256;
            maxBodySize = "64m";
          };
        };
        keys.same = {
          file = "/run/secrets/same";
          limits.rate = "10r/s"; # the default: stays in the default group
        };
        keys.tiny = {
          file = "/run/secrets/tiny";
          limits.burst = 0;
        };
      }
    ) (
      config:
      let
        http = (gw config).commonHttpConfig;
        batch = location "^~ /_vllm_station/key-batch/" config;
      in
      has "groups map" http "  batch key-batch;\n"
      ++ lacks "default group" http "same key-same"
      ++ has "batch zone" http "limit_conn_zone $vllm_station_key zone=vllm_station_conn_key-batch:1m;"
      ++ has "batch body" batch "client_max_body_size 64m;"
      ++ has "batch concurrency" batch "limit_conn vllm_station_conn_key-batch 256;"
      ++ has "batch keeps the default rate" batch "limit_req zone=vllm_station_rate_key-batch burst=50 nodelay;"
      ++ has "burst 0 is nginx's default (1.22 refuses burst=0)" (location "^~ /_vllm_station/key-tiny/" config) "limit_req zone=vllm_station_rate_key-tiny nodelay;"
      ++ h.eq "groups" (lib.filter (lib.hasPrefix "^~") (lib.attrNames (vhost config).locations)) [
        "^~ /_vllm_station/default/"
        "^~ /_vllm_station/key-batch/"
        "^~ /_vllm_station/key-tiny/"
      ]
    );

    several-stations-round-robin-affinity = h.check (
      with' {
        upstreams = {
          b.address = "10.0.0.2:8443";
          c = {
            address = "10.0.0.3:8443";
            weight = 3;
          };
        };
        stationTls = stationTls;
        balancing = "round-robin";
        affinity.header = "X-Session-ID";
        passiveHealth = {
          maxFails = 2;
          failTimeout = 10;
        };
      }
    ) (
      config:
      let
        ups = (gw config).upstreams;
      in
      # A definition replaces the default (this station): list it too to keep it.
      h.eq "servers" (lib.attrNames ups.vllm_station.servers) [
        "10.0.0.2:8443"
        "10.0.0.3:8443"
      ]
      ++ h.eq "weight and health" ups.vllm_station.servers."10.0.0.3:8443" {
        weight = 3;
        max_fails = 2;
        fail_timeout = "10s";
      }
      ++ lacks "round-robin" ups.vllm_station.extraConfig "least_conn"
      ++ has "affinity pool" ups.vllm_station_affinity.extraConfig "hash $http_x_session_id consistent;"
      ++ h.eq "same servers" ups.vllm_station_affinity.servers ups.vllm_station.servers
      ++ has "pool by header" (gw config).commonHttpConfig "map $http_x_session_id $vllm_station_pool {"
      ++ has "proxied by pool" (location "^~ /_vllm_station/default/" config) "proxy_pass https://$vllm_station_pool$vllm_station_path;"
      ++ has "tries every station once" (location "^~ /_vllm_station/default/" config) "proxy_next_upstream_tries 2;"
    );

    paths-and-health = h.check (
      with' {
        paths = [
          "/v1/chat/completions"
          "/v1/responses"
        ];
        health = false;
        allowFrom = [ "10.0.0.0/8" ];
      }
    ) (
      config:
      h.eq "locations" (lib.filter (lib.hasPrefix "= /v") (lib.attrNames (vhost config).locations)) [
        "= /v1/chat/completions"
        "= /v1/responses"
        "= /version"
      ]
      ++ h.eq "no health" ((vhost config).locations ? "= /health") false
      ++ has "allow" (vhost config).extraConfig "allow 10.0.0.0/8;"
      ++ has "deny the rest" (vhost config).extraConfig "deny all;"
    );

    operator-role = h.check (with' { keys.ops = { file = "/run/secrets/ops"; role = "operator"; }; }) (
      config: has "role map" (gw config).commonHttpConfig "  ops operator;\n"
    );

    upstream-follows-serve-host = h.check (withServe { host = "::1"; }) (
      config:
      h.eq "servers" (lib.attrNames (gw config).upstreams.vllm_station.servers) [ "[::1]:8000" ]
    );

    # ---- assertions ----
    key-name-default = h.assertionFails (with' { keys.default.file = "/run/secrets/x"; }) "services.vllm-station.gateway.keys: rename default";
    key-name-include = h.assertionFails (with' { keys.Include.file = "/run/secrets/x"; }) "services.vllm-station.gateway.keys: rename Include";
    key-name-hostnames = h.assertionFails (with' { keys.hostnames.file = "/run/secrets/x"; }) "rename hostnames";
    key-name-volatile = h.assertionFails (with' { keys.volatile.file = "/run/secrets/x"; }) "rename volatile";
    key-names-in-any-case = h.assertionFails (with' { keys.Alice.file = "/run/secrets/x"; }) "rename alice";
    error-log-info = h.assertionFails (with' { } ++ [ { services.nginx.logError = lib.mkForce "stderr info"; } ]) "services.nginx.logError = \"stderr info\" logs request headers";
    error-log-debug = h.assertionFails (with' { } ++ [ { services.nginx.logError = lib.mkForce "/var/log/nginx/error.log debug"; } ]) "logs request headers";
    operator-paths-not-paths = h.assertionFails (with' { operatorPaths = [ "/v1/models" ]; }) "services.vllm-station.gateway.operatorPaths:";
    vllm-on-loopback = h.assertionFails (withServe { host = "0.0.0.0"; }) "vLLM listens on 0.0.0.0";
    vllm-firewall-closed = h.assertionFails (withServe { openFirewall = true; }) "set services.vllm-station.serve.openFirewall = false";
    needs-keys = h.assertionFails (with' { keys = lib.mkForce { }; }) "no API keys";
    needs-tls = h.assertionFails (with' {
      tls.certificateFile = lib.mkForce null;
      tls.keyFile = lib.mkForce null;
    }) "TLS needs either tls.acme";
    tls-not-both-ways = h.assertionFails (with' { tls.acme = true; }) "TLS needs either tls.acme";
    tls-key-with-certificate = h.assertionFails (with' { tls.keyFile = lib.mkForce null; }) "set tls.certificateFile and tls.keyFile together";
    key-outside-store = h.assertionFails (with' { keys.alice.file = lib.mkForce "/nix/store/x-key"; }) "outside the Nix store";
    tls-key-outside-store = h.assertionFails (with' { tls.keyFile = lib.mkForce "/nix/store/x-key.pem"; }) "outside the Nix store";
    key-names = h.assertionFails (with' { keys."al ice".file = "/run/secrets/x"; }) "key names are 1-64 characters of A-Z a-z 0-9 _ - (got al ice)";
    needs-upstreams = h.assertionFails [
      nginxDefaults
      base
      { services.vllm-station.serve.enable = lib.mkForce false; }
    ] "no upstreams";
    affinity-header = h.assertionFails (with' { affinity.header = "X Session"; }) "affinity.header must be a header name";
    paths-are-paths = h.assertionFails (with' { paths = [ "/v1/x;deny" ]; }) "paths are absolute URL paths";
    no-internal-paths = h.assertionFails (with' { paths = [ "/_vllm_station/default/v1/models" ]; }) "not under /_vllm_station";
    # ---- TLS to the stations (stationTls) and the station end (stationListener) ----
    station-tls = h.check (with' {
      upstreams = {
        local.address = "127.0.0.1:8443"; # this station's own listener
        b.address = "10.0.0.2:8443";
      };
      inherit stationTls;
    }) (
      config:
      let
        server = (vhost config).extraConfig;
      in
      has "https to the pool" (location "^~ /_vllm_station/default/" config) "proxy_pass https://vllm_station$vllm_station_path;"
      ++ has "https for /health" (location "= /health" config) "proxy_pass https://vllm_station$vllm_station_path;"
      ++ lib.concatMap (has "server" server) [
        "proxy_ssl_verify on;"
        "proxy_ssl_trusted_certificate /var/lib/gw/stations-ca.pem;"
        "proxy_ssl_name stations.internal;"
        "proxy_ssl_server_name on;"
        "proxy_ssl_certificate /var/lib/gw/client.pem;"
        "proxy_ssl_certificate_key /var/lib/gw/client-key.pem;"
      ]
    );
    plain-http-without-station-tls = h.check (with' { }) (
      config:
      lacks "server" (vhost config).extraConfig "proxy_ssl"
      ++ has "http to this station" (location "^~ /_vllm_station/default/" config) "proxy_pass http://vllm_station$vllm_station_path;"
    );
    remote-upstream-needs-tls = h.assertionFails (with' {
      upstreams.b.address = "10.0.0.2:8000";
    }) "services.vllm-station.gateway.upstreams: b (10.0.0.2:8000) would be reached in plain HTTP";
    remote-ipv6-upstream-needs-tls = h.assertionFails (with' {
      upstreams.b.address = "[fd00::2]:8000";
    }) "b ([fd00::2]:8000) would be reached in plain HTTP";
    no-plain-local-in-a-tls-pool = h.assertionFails (with' {
      upstreams = {
        local.address = "127.0.0.1:8000";
        b.address = "10.0.0.2:8443";
      };
      inherit stationTls;
    }) "services.vllm-station.gateway.upstreams: local is this station's vLLM (127.0.0.1:8000) in plain HTTP";
    station-tls-complete = h.assertionFails (with' {
      upstreams.b.address = "10.0.0.2:8443";
      stationTls = stationTls // { caFile = null; };
    }) "services.vllm-station.gateway.stationTls: set caFile";
    station-tls-key-outside-store = h.assertionFails (with' {
      upstreams.b.address = "10.0.0.2:8443";
      stationTls = stationTls // { keyFile = "/nix/store/x-key.pem"; };
    }) "services.vllm-station.gateway.stationTls.keyFile must be an absolute path outside the Nix store";

    listener = h.check (listener { }) (
      config:
      let
        v = listenerVhost config;
        fw = config.networking.firewall;
      in
      h.eq "listen" v.listen [
        {
          addr = "10.0.0.2";
          port = 8443;
          ssl = true;
        }
      ]
      ++ h.eq "TLS only" v.onlySSL true
      ++ h.eq "certificate" [ v.sslCertificate v.sslCertificateKey ] [ "/var/lib/l/cert.pem" "/var/lib/l/key.pem" ]
      ++ lib.concatMap (has "server" v.extraConfig) [
        "ssl_client_certificate /var/lib/l/gateways-ca.pem;"
        "ssl_verify_client on;"
        "allow 10.0.0.1;\nallow fd00::1;\ndeny all;"
      ]
      ++ has "to vLLM on loopback" v.locations."/".extraConfig "proxy_pass http://127.0.0.1:8888;"
      ++ h.eq "iptables: the gateways, nothing else" (lib.splitString "\n" fw.extraCommands) [
        "iptables -w -A nixos-fw -p tcp -s 10.0.0.1 --dport 8443 -j nixos-fw-accept"
        "ip6tables -w -A nixos-fw -p tcp -s fd00::1 --dport 8443 -j nixos-fw-accept"
        ""
      ]
      ++ h.eq "nothing opened to the world" (fw.allowedTCPPorts or [ ]) [ ]
      ++ h.eq "vLLM stays on loopback" config.services.vllm-station.serve.host "127.0.0.1"
    );
    listener-nftables = h.check (listener { } ++ [ { networking.nftables.enable = true; } ]) (
      config:
      h.eq "nftables input rules" config.networking.firewall.extraInputRules ''
        ip saddr { 10.0.0.1 } tcp dport 8443 accept comment "vllm-station listener: gateways"
        ip6 saddr { fd00::1 } tcp dport 8443 accept comment "vllm-station listener: gateways"
      ''
      ++ h.eq "no iptables commands (the nftables firewall refuses them)" (config.networking.firewall.extraCommands or "") ""
    );
    listener-on-loopback = h.check (listener { host = lib.mkForce "127.0.0.1"; gateways = lib.mkForce [ ]; }) (
      config:
      h.eq "no firewall rule" (config.networking.firewall.extraCommands or "") ""
      ++ has "this host only" (listenerVhost config).extraConfig "allow 127.0.0.1;\nallow ::1;\ndeny all;"
    );
    listener-needs-gateways = h.assertionFails (listener { gateways = lib.mkForce [ ]; }) "services.vllm-station.stationListener: listening on 10.0.0.2 with no gateways; set stationListener.gateways";
    listener-gateways-are-addresses = h.assertionFails (listener { gateways = [ "gw.example.com" ]; }) "services.vllm-station.stationListener.gateways: IP addresses or networks only";
    listener-needs-firewall = h.assertionFails (listener { } ++ [ { networking.firewall.enable = lib.mkForce false; } ]) "services.vllm-station.stationListener: networking.firewall.enable is false";
    listener-needs-tls = h.assertionFails (listener { tls.clientCaFile = lib.mkForce null; }) "services.vllm-station.stationListener.tls: set certificateFile, keyFile";
    listener-key-outside-store = h.assertionFails (listener { tls.keyFile = lib.mkForce "/nix/store/x-key.pem"; }) "services.vllm-station.stationListener.tls.keyFile must be an absolute path outside the Nix store";
    listener-needs-serve = h.assertionFails (listener { } ++ [ { services.vllm-station.serve.enable = lib.mkForce false; } ]) "services.vllm-station.stationListener: there is no API to listen for";
    rate-format = h.throws (with' { limits.rate = "fast"; });
    body-size-format = h.throws (with' { limits.maxBodySize = "1 GB"; });
  };
  results = lib.mapAttrs (name: test: h.run "gateway/${name}" test) tests;
in
if output == "names" then
  lib.attrNames tests
else if only != null then
  h.runUncaught only tests.${only}
else
  {
    passed = lib.attrNames (lib.filterAttrs (_: r: r == [ ]) results);
    failed = lib.mapAttrsToList (name: problems: {
      inherit name;
      message = lib.concatStringsSep "\n" problems;
    }) (lib.filterAttrs (_: r: r != [ ]) results);
  }
