# services.vllm-station.gateway: TLS, API keys, a path allowlist and per-key limits in front of vLLM,
# and several stations behind one endpoint. Built on nixpkgs' `services.nginx` (a virtual host, its
# upstreams and http-level maps); no proxy of our own.
#
# What this module owns:
#   services.nginx.virtualHosts.vllm-station-gateway   the endpoint (TLS, allowlist, errors as JSON)
#   services.nginx.upstreams.vllm_station[_affinity]    the stations (least-conn or round-robin; hash)
#   services.nginx.commonHttpConfig                     the log format, key/limit maps, limit zones
#   systemd.services.vllm-station-gateway-keys          runs before nginx (and with each restart of it):
#       `station gateway keys` turns the API key files (systemd credentials, never in the store) into
#       the map nginx includes, /run/vllm-station-gateway/keys.map, readable by nginx's user only; then
#       reloads nginx if it runs. A restart of this unit is a key rotation: nginx reloads (streams in
#       flight complete), it never restarts; a bad key file fails this unit and changes nothing.
# nginx's own unit belongs to nixpkgs' module and is not edited: this unit is ordered before it and
# wanted by it (`wantedBy`, `before`, `partOf` on this side). Wanted, not required: a required unit's
# restart restarts nginx, and its failure would stop it; nginx without a keys map refuses its
# configuration (an `include` of a missing file), so the gateway still fails closed.
#
# A request: `location = <allowlisted path>` refuses a request without a known key (401) or whose key's
# role may not use the path (403), records the path it chose ($vllm_station_path, a literal of this
# file), then rewrites to the internal location of its key's limits group, which applies `limit_req`,
# `limit_conn` and `client_max_body_size` and proxies that literal path, unbuffered: no byte of the
# client's URI (dot segments, encodings, `;` parameters, the query) reaches a station. `/health` is
# keyless: GET/HEAD only, no body, its own per-address rate, a fixed URI. Every other path is 404.
# Every error nginx itself produces — before a location was chosen too — is OpenAI-style JSON
# (modules/gateway/errors.json).
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
    literalExpression
    optional
    optionals
    optionalString
    concatMapStringsSep
    ;

  cfg = config.services.vllm-station.gateway;
  serve = config.services.vllm-station.serve;
  nginx = config.services.nginx;
  station = lib.getExe config.services.vllm-station.package;
  hardening = import ./lib/hardening.nix;
  contract = import ./lib/contract.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };
  errors = lib.importJSON ./gateway/errors.json;

  # ---- names (this module is their one home; tests read them from the rendered configuration) ----
  vhost = "vllm-station-gateway";
  keysUnit = "vllm-station-gateway-keys";
  runtimeDir = "/run/vllm-station-gateway";
  keysMap = "${runtimeDir}/keys.map";
  upstreamAuthMap = "${runtimeDir}/upstream-authorization.map";
  accessLog = "/var/log/nginx/vllm-station-gateway.log";
  pool = "vllm_station";
  affinityPool = "vllm_station_affinity";
  internalPrefix = "/_vllm_station";
  keyDirCredential = "keydir"; # LoadCredential of a directory: one credential keydir_<file name> each
  errorPrefix = "${internalPrefix}/error";

  # Words a `map` block reads as its own parameters: a key name equal to one (any case: map sources are
  # compared case-insensitively) would break the limits and role maps, which list key names as sources.
  mapKeywords = [
    "default"
    "hostnames"
    "include"
    "volatile"
  ];
  reservedName = name: lib.elem (lib.toLower name) mapKeywords;
  lowerNames = map lib.toLower (lib.attrNames cfg.keys);
  caseCollisions = lib.filter (n: lib.count (m: m == n) lowerNames > 1) (lib.unique lowerNames);
  # nginx writes request headers (both values of a duplicate Authorization, in full) at these levels.
  verboseErrorLog = builtins.match "(.*[[:space:]])?(info|debug)([[:space:]].*)?" nginx.logError != null;

  inherit (unit) isSecretPath;
  validName = name: builtins.match "[A-Za-z0-9_-]{1,64}" name != null;

  # ---- limits: a group per distinct set of limits; keys without their own share "default" ----
  limitFields = [
    "rate"
    "burst"
    "connections"
    "maxBodySize"
  ];
  limitsOf = key: cfg.limits // lib.filterAttrs (_: v: v != null) (lib.getAttrs limitFields key.limits);
  groupOf = name: key: if limitsOf key == cfg.limits then "default" else "key-${name}";
  groups =
    {
      default = cfg.limits;
    }
    // lib.mapAttrs' (name: key: lib.nameValuePair (groupOf name key) (limitsOf key)) (
      lib.filterAttrs (name: key: groupOf name key != "default") cfg.keys
    );

  # ---- upstreams ----
  upstreamServers = lib.mapAttrs' (
    _: u:
    lib.nameValuePair u.address {
      weight = u.weight;
      max_fails = cfg.passiveHealth.maxFails;
      fail_timeout = "${toString cfg.passiveHealth.failTimeout}s";
    }
  ) cfg.upstreams;
  # vLLM's HTTP server closes idle connections after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE); closing ours
  # first avoids sending a request on a connection the engine is closing at that moment.
  upstreamKeepalive = ''
    keepalive 64;
    keepalive_timeout 4s;
  '';
  # One scheme for the pool (nginx's proxy_pass names one): https to every station, or http to this one.
  scheme = if cfg.stationTls.enable then "https" else "http";
  hostOf =
    address:
    let
      bracketed = builtins.match "(\\[[^]]*])(:[0-9]+)?" address;
    in
    if bracketed != null then builtins.head bracketed else lib.head (lib.splitString ":" address);
  remoteUpstreams = lib.filterAttrs (_: u: !contract.isLoopback (hostOf u.address)) cfg.upstreams;
  # This station's vLLM as the gateway reaches it (`host:port`): serve.clientUrl, the one source.
  localVllm = lib.removePrefix "http://" serve.clientUrl;
  plainLocal = lib.filterAttrs (_: u: serve.enable && u.address == localVllm) cfg.upstreams;
  stationTlsConfig = optionalString cfg.stationTls.enable ''
    # The stations: TLS verified against stationTls.caFile for stationTls.serverName, with the
    # gateway's client certificate (their listeners refuse any other client).
    proxy_ssl_verify on;
    proxy_ssl_verify_depth 2;
    proxy_ssl_trusted_certificate ${cfg.stationTls.caFile};
    proxy_ssl_name ${cfg.stationTls.serverName};
    proxy_ssl_server_name on;
    proxy_ssl_protocols TLSv1.2 TLSv1.3;
    proxy_ssl_certificate ${cfg.stationTls.certificateFile};
    proxy_ssl_certificate_key ${cfg.stationTls.keyFile};
    proxy_ssl_session_reuse on;
  '';
  sessionVar = "$http_" + lib.replaceStrings [ "-" ] [ "_" ] (lib.toLower cfg.affinity.header);
  target = if cfg.affinity.header != null then "$vllm_station_pool" else pool;

  # ---- drain (`station drain`, the serving unit's stop) ----
  # With plain HTTP every station of the pool is on this host: the gateway reads this host's drain flags
  # itself. With stationTls each station's listener reads its own (modules/station-listener.nix), and
  # its 503 sends idempotent requests to the next station (`http_503` below), marking it failed.
  drainRetryAfter = 10;
  drainCheck = optionalString (!cfg.stationTls.enable) ''
    # This station is drained or stopping: new requests get 503, those in flight finish.
    if (-f ${contract.drainFlag}) {
      rewrite ^ ${errorUri "503-draining"} last;
    }
    if (-f ${contract.stoppingFlag}) {
      rewrite ^ ${errorUri "503-draining"} last;
    }
  '';

  # ---- nginx text ----
  # errors.json: "<status>" or "<status>-<case>" (a second body for the same status) -> the body.
  statusOf = name: lib.head (lib.splitString "-" name);
  jsonError = name: builtins.toJSON { error = errors.${name} // { param = null; }; };
  errorUri = name: "${errorPrefix}/${name}";
  # Exact URI locations, not named ones: nginx reaches a named location only after it parsed a request
  # line, so its 400 / 414 / 505 for a malformed one would fall back to an HTML 500.
  errorLocations = lib.mapAttrs' (
    name: _:
    lib.nameValuePair "= ${errorUri name}" {
      extraConfig = ''
        internal;
        default_type application/json;
        ${optionalString (name == "401") ''add_header WWW-Authenticate 'Bearer realm="vllm-station"' always;''}
        ${optionalString (name == "429") "add_header Retry-After 1 always;"}
        ${optionalString (name == "405") "add_header Allow 'GET, HEAD' always;"}
        ${optionalString (name == "503-draining") "add_header Retry-After ${toString drainRetryAfter} always;"}
        return ${statusOf name} '${jsonError name}';
      '';
    }
  ) errors;
  # nginx's non-standard codes for a bad request (header too large, TLS client certificate problems,
  # plain HTTP on the TLS port) are answered as the standard 400.
  errorAliases = {
    "494" = "400";
    "495" = "400";
    "496" = "400";
    "497" = "400";
  };
  errorPages = lib.concatStrings (
    lib.mapAttrsToList (name: _: "error_page ${name} ${errorUri name};\n") (
      lib.filterAttrs (name: _: builtins.match "[0-9]+" name != null) errors
    )
    ++ lib.mapAttrsToList (code: name: "error_page ${code} =${statusOf name} ${errorUri name};\n") errorAliases
  );

  # One JSON object a line; the key's name, never the Authorization header.
  logFormat = builtins.toJSON {
    time = "$time_iso8601";
    request_id = "$request_id";
    client = "$remote_addr";
    key = "$vllm_station_key";
    method = "$vllm_station_log_method";
    path = "$vllm_station_log_path";
    status = "$status";
    request_bytes = "$request_length";
    response_bytes = "$bytes_sent";
    request_time = "$request_time";
    upstream = "$upstream_addr";
    upstream_status = "$upstream_status";
    upstream_connect_time = "$upstream_connect_time";
    upstream_header_time = "$upstream_header_time";
    session = if cfg.affinity.header != null then sessionVar else "";
  };

  httpConfig = ''
    # ---- vllm-station gateway (services.vllm-station.gateway) ----
    log_format vllm_station_gateway escape=json '${logFormat}';
    # The method and path as the client sent them (the path without its query): an answer from an
    # error location would otherwise be logged as that location's GET.
    map $request $vllm_station_log_method {
      default "";
      "~^(?<vllm_station_m>[A-Z]+) " $vllm_station_m;
    }
    map $request_uri $vllm_station_log_path {
      default "";
      "~^(?<vllm_station_p>[^?]*)" $vllm_station_p;
    }
    # Authorization -> the key's name ("" = no known key), in three steps: the token of a `Bearer`
    # header (one regular expression for every key), a hash lookup of that token in the entries
    # ${keysUnit}.service writes at start (`station gateway keys`; the value is "<key> <name>"), and —
    # since a map compares case-insensitively — an exact comparison of the token with the key found.
    map $http_authorization $vllm_station_token {
      default "";
      "~^(?i:bearer) +(?<vllm_station_t>[A-Za-z0-9._~+/=-]{16,256})$" $vllm_station_t;
    }
    map $vllm_station_token $vllm_station_entry {
      default "";
      include ${keysMap};
    }
    map "$vllm_station_entry|$vllm_station_token" $vllm_station_key {
      default "";
      "~^(?<vllm_station_k>[^ |]+) (?<vllm_station_n>[A-Za-z0-9_-]+)[|]\k<vllm_station_k>$" $vllm_station_n;
    }
    # The key's role: `operator` may use gateway.operatorPaths too.
    map $vllm_station_key $vllm_station_role {
      default user;
    ${lib.concatStrings (
      lib.mapAttrsToList (name: _: "  ${name} operator;\n") (lib.filterAttrs (_: k: k.role == "operator") cfg.keys)
    )}}
    # The Authorization the stations receive: their own key (upstreamApiKeyFile) or none; never the client's.
    map $host $vllm_station_upstream_authorization {
      include ${upstreamAuthMap};
    }
    # The key's limits group.
    map $vllm_station_key $vllm_station_limits {
      default default;
    ${lib.concatStrings (
      lib.mapAttrsToList (name: key: "  ${name} ${groupOf name key};\n") (
        lib.filterAttrs (name: key: groupOf name key != "default") cfg.keys
      )
    )}}
    ${lib.concatStrings (
      lib.mapAttrsToList (group: l: ''
        limit_req_zone $vllm_station_key zone=vllm_station_rate_${group}:1m rate=${l.rate};
        limit_conn_zone $vllm_station_key zone=vllm_station_conn_${group}:1m;
      '') groups
    )}
    # /health, keyless: its own rate per client address; 200s logged at 1 %, everything else always.
    limit_req_zone $binary_remote_addr zone=vllm_station_health:1m rate=${cfg.healthRate};
    split_clients $request_id $vllm_station_health_sample {
      1% 1;
      * "";
    }
    map $status $vllm_station_health_log {
      200 $vllm_station_health_sample;
      default 1;
    }
    ${optionalString (cfg.affinity.header != null) ''
      # A request with the session header goes to the station its value hashes to.
      map ${sessionVar} $vllm_station_pool {
        "" ${pool};
        default ${affinityPool};
      }
    ''}
  '';

  # The URI is $vllm_station_path, set by the allowlisted location to its own literal path: with a
  # variable, nginx sends exactly that (no query, nothing of the client's URI).
  proxyConfig = ''
    proxy_pass ${scheme}://${target}$vllm_station_path;
    proxy_http_version 1.1;
    # Unbuffered both ways of the stream: each SSE chunk leaves as it arrives.
    proxy_buffering off;
    proxy_cache off;
    proxy_set_header Connection "";
    proxy_set_header Host $proxy_host;
    proxy_set_header Authorization $vllm_station_upstream_authorization;
    proxy_set_header X-Request-Id $request_id;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_connect_timeout ${toString cfg.connectTimeout}s;
    proxy_send_timeout ${toString cfg.readTimeout}s;
    proxy_read_timeout ${toString cfg.readTimeout}s;
    # Another station only when this one could not be reached: a POST that reached an engine is
    # never sent twice (nginx retries non-idempotent requests only with `non_idempotent`). A 503 (a
    # drained station's listener) sends a GET to the next station and marks that station failed; a
    # POST gets the 503 (it reached no engine: the client may retry).
    proxy_next_upstream error timeout http_503;
    proxy_next_upstream_tries ${toString (lib.length (lib.attrNames cfg.upstreams))};
  '';

  groupLocations = lib.mapAttrs' (
    group: l:
    lib.nameValuePair "^~ ${internalPrefix}/${group}/" {
      extraConfig = ''
        internal;
        if ($vllm_station_path = "") {
          return 404;
        }
        client_max_body_size ${l.maxBodySize};
        # The whole body in memory, never in a temporary file (prompts at rest, page cache on node 1).
        client_body_buffer_size ${l.maxBodySize};
        limit_req zone=vllm_station_rate_${group}${optionalString (l.burst > 0) " burst=${toString l.burst}"} nodelay;
        limit_conn vllm_station_conn_${group} ${toString l.connections};
        ${proxyConfig}
      '';
    }
  ) groups;

  pathLocation =
    operator: path:
    lib.nameValuePair "= ${path}" {
      extraConfig = ''
        # The body limit is the key's, checked in its group's location (nginx checks a
        # Content-Length in every location a request passes; 0: not here).
        client_max_body_size 0;
        if ($vllm_station_key = "") {
          return 401;
        }
        ${optionalString operator ''
          if ($vllm_station_role != operator) {
            rewrite ^ ${errorUri "403-operator"} last;
          }
        ''}
        ${drainCheck}
        set $vllm_station_path ${path};
        rewrite ^ ${internalPrefix}/$vllm_station_limits/ last;
      '';
    };
  pathLocations = lib.listToAttrs (map (pathLocation false) cfg.paths ++ map (pathLocation true) cfg.operatorPaths);

  healthLocation = lib.optionalAttrs cfg.health {
    "= /health" = {
      extraConfig = ''
        access_log ${accessLog} vllm_station_gateway if=$vllm_station_health_log;
        limit_req zone=vllm_station_health burst=10 nodelay;
        if ($request_method !~ ^(GET|HEAD)$) {
          return 405;
        }
        # No body: a Content-Length other than 0, or any Transfer-Encoding, is refused unread.
        if ($http_content_length !~ ^0?$) {
          return 413;
        }
        if ($http_transfer_encoding) {
          return 413;
        }
        ${drainCheck}
        # A fixed URI (a variable: nginx sends it as is, without the client's query).
        set $vllm_station_path /health;
        proxy_pass ${scheme}://${pool}$vllm_station_path;
        # vLLM routes /health for GET only (HEAD is its 405): a HEAD goes up as GET, and nginx sends the
        # client the headers alone.
        proxy_method GET;
        proxy_pass_request_body off;
        proxy_http_version 1.1;
        proxy_set_header Host $proxy_host;
        proxy_set_header Connection "";
        proxy_set_header Content-Length "";
        proxy_set_header Authorization "";
        proxy_connect_timeout ${toString cfg.connectTimeout}s;
        proxy_read_timeout 10s;
        # A drained station's 503 (its listener's): ask the next one.
        proxy_next_upstream error timeout http_503;
      '';
    };
  };

  serverConfig = ''
    access_log ${accessLog} vllm_station_gateway;
    ${concatMapStringsSep "\n" (a: "allow ${a};") cfg.allowFrom}
    ${optionalString (cfg.allowFrom != [ ]) "deny all;"}
    limit_req_status 429;
    limit_conn_status 429;
    ${stationTlsConfig}
    ${errorPages}
    ${cfg.extraConfig}
  '';

  # ---- the keys unit: `station gateway keys` with the credentials systemd loads ----
  # The credentials and the arguments naming them: modules/lib/unit.nix (key names are restricted to
  # [A-Za-z0-9_-] by an assertion).
  keyCredential = name: "key-${name}";
  credentialList =
    lib.mapAttrsToList (name: key: unit.credential (keyCredential name) key.file) cfg.keys
    ++ optional (cfg.keysDirectory != null) (unit.credential keyDirCredential cfg.keysDirectory)
    ++ optional (cfg.upstreamApiKeyFile != null) (unit.credential "upstream-key" cfg.upstreamApiKeyFile);
  keysCommand = unit.execLine (
    [
      station
      "gateway"
      "keys"
      "--output"
      keysMap
      "--upstream-out"
      upstreamAuthMap
    ]
    ++ lib.concatMap (name: [
      "--key"
      (unit.credentialArg {
        name = keyCredential name;
        prefix = "${name}=";
      })
    ]) (lib.attrNames cfg.keys)
    ++ optionals (cfg.keysDirectory != null) [
      "--key-dir"
      (unit.credentialArg { })
      "--prefix"
      "${keyDirCredential}_"
    ]
    ++ optionals (cfg.upstreamApiKeyFile != null) [
      "--upstream-key-file"
      (unit.credentialArg { name = "upstream-key"; })
    ]
  );
  # The key files, checked before the keys unit loads them (modules/secrets.nix).
  secretFiles =
    lib.mapAttrsToList (name: key: {
      option = "services.vllm-station.gateway.keys.${name}.file";
      path = key.file;
    }) cfg.keys
    ++ optional (cfg.keysDirectory != null) {
      option = "services.vllm-station.gateway.keysDirectory";
      path = cfg.keysDirectory;
      kind = "directory";
    }
    ++ optional (cfg.upstreamApiKeyFile != null) {
      option = "services.vllm-station.gateway.upstreamApiKeyFile";
      path = cfg.upstreamApiKeyFile;
    };
  secretsCheck = [ (contract.secretsCheckUnit keysUnit) ];
  # The stations' key is this station's own (the default): its rotation — a restart of the serving
  # unit (docs/secrets.md) — re-reads it here too, and nginx reloads with it.
  followsStationKey = serve.enable && serve.apiKeyFile != null && cfg.upstreamApiKeyFile == serve.apiKeyFile;
  # After the maps are written: nginx reloads when it runs (`try-`: nothing when it does not, e.g. at
  # boot, where it starts after this unit). `--no-block`: nginx is ordered after this unit, so its
  # reload job waits for this start to finish. `+`: the system manager is root's to call.
  reloadNginx =
    "+"
    + utils.escapeSystemdExecArgs [
      (lib.getExe' config.systemd.package "systemctl")
      "--no-block"
      "try-reload-or-restart"
      "nginx.service"
    ];

  # gateway.limits (the defaults) and keys.<name>.limits (null: the default) share one definition.
  limitsOptions =
    isDefault:
    let
      option =
        type: default: description:
        mkOption {
          type = if isDefault then type else types.nullOr type;
          default = if isDefault then default else null;
          inherit description;
        };
    in
    {
      rate =
        option (types.strMatching "[0-9]+r/[sm]") "10r/s"
          "Requests per second (`r/s`) or minute (`r/m`) of one key (`limit_req_zone … rate=`).";
      burst =
        option types.ints.unsigned 50
          "Requests over the rate one key may send at once before it gets 429 (`limit_req … burst= nodelay`).";
      connections =
        option types.ints.positive 64
          "Requests of one key in flight at once (`limit_conn`); more get 429.";
      maxBodySize = option (types.strMatching "[0-9]+[kKmMgG]?") "32m" ''
        Largest request body of one key (`client_max_body_size`); larger ones get 413. The default
        holds a 1M-token prompt: docs/gateway.md gives the bytes per token measured for prose, code
        and CJK text, escaped as JSON.
      '';
    };
in
{
  options.services.vllm-station.gateway = {
    enable = mkEnableOption ''
      the gateway in front of vLLM: nixpkgs' nginx with TLS, API keys, a path allowlist, per-key
      limits and OpenAI-style errors, balancing over one or more stations'';

    host = mkOption {
      type = types.str;
      default = "0.0.0.0";
      example = "192.168.1.20";
      description = ''
        Address the gateway listens on (IPv6 in brackets). Unlike vLLM's, the default is every
        interface: the gateway is what the network talks to, and it lets nothing through without a key.
      '';
    };

    port = mkOption {
      type = types.port;
      default = 443;
      description = "HTTPS port of the gateway.";
    };

    serverName = mkOption {
      type = types.str;
      default = config.networking.fqdnOrHostName;
      defaultText = literalExpression "config.networking.fqdnOrHostName";
      example = "llm.example.com";
      description = "Name clients use (`server_name`; the certificate's name with `tls.acme`).";
    };

    tls = {
      acme = mkOption {
        type = types.bool;
        default = false;
        description = ''
          Get the certificate from an ACME CA (`services.nginx.virtualHosts.<name>.enableACME`;
          configure `security.acme.acceptTerms` and `security.acme.defaults.email`). Adds a port-80
          listener for the HTTP-01 challenge that redirects everything else to HTTPS.
        '';
      };
      certificateFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-gateway/fullchain.pem";
        description = "Certificate chain (PEM), a path outside the Nix store; instead of `acme`.";
      };
      keyFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-gateway/key.pem";
        description = ''
          Private key (PEM) of `certificateFile`, a path outside the Nix store, readable by nginx's
          user or group (`services.nginx.group`).
        '';
      };
    };

    keys = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            file = mkOption {
              type = types.str;
              example = "${contract.secretsDir}/gateway-alice";
              description = ''
                File holding this name's key (one a line: several lines rotate keys). Read by the keys
                unit at its start (and at each start of nginx) through systemd's `LoadCredential=`;
                never copied to the Nix store. After changing it, `systemctl restart
                vllm-station-gateway-keys` reloads nginx with it (docs/gateway.md).
                Keys are 16 to 256 characters of `A-Z a-z 0-9 - . _ ~ + / =`.
              '';
            };
            role = mkOption {
              type = types.enum [
                "user"
                "operator"
              ];
              default = "user";
              description = ''
                What the key may use: `user`, the `paths` (inference); `operator`, also the
                `operatorPaths` (what `station golive` and `station gates needle` need: `/tokenize`,
                `/version`). A `user` key gets 403 there.
              '';
            };
            limits = limitsOptions false;
          };
        }
      );
      default = { };
      example = literalExpression ''
        {
          alice.file = "${contract.secretsDir}/gateway-alice";
          batch = { file = "${contract.secretsDir}/gateway-batch"; limits = { connections = 128; rate = "50r/s"; }; };
        }
      '';
      description = ''
        API keys by name. The access log records the name, never the key or the `Authorization`
        header. `limits` overrides `gateway.limits` for this key (null: the default); `role` says
        whether it may use the `operatorPaths`. A name is 1-64 characters of `A-Z a-z 0-9 _ -`, unique
        in any case, and none of nginx's `map` keywords (`default`, `hostnames`, `include`, `volatile`).
      '';
    };

    keysDirectory = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "${contract.secretsDir}/gateway-keys";
      description = ''
        A directory of key files (name = file name, `A-Z a-z 0-9 _ -`), read at each start like
        `keys.<name>.file`; its keys get the default `limits` and the `user` role.
      '';
    };

    limits = limitsOptions true;

    paths = mkOption {
      type = types.listOf types.str;
      default = [
        "/v1/chat/completions"
        "/v1/completions"
        "/v1/models"
      ];
      example = [
        "/v1/chat/completions"
        "/v1/completions"
        "/v1/models"
        "/v1/responses"
      ];
      description = ''
        The only paths the gateway forwards (exact matches, with a key). Everything else — vLLM's
        `/invocations`, `/pause`, `/resume`, `/tokenize`, `/metrics`, … — is answered 404 by the gateway.
        Prometheus scrapes `/metrics` on vLLM's loopback port directly.
      '';
    };

    operatorPaths = mkOption {
      type = types.listOf types.str;
      default = [
        "/tokenize"
        "/version"
      ];
      description = ''
        Paths forwarded only for keys with `role = "operator"` (exact matches; other keys get 403):
        vLLM's `/tokenize`, which `station gates needle` (and so `station golive`) counts prompts
        with, and `/version`, which their reports record.
      '';
    };

    health = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Forward `GET`/`HEAD /health` without a key (for load balancers and probes): always as the
        fixed URI `/health`, never with a body, at `healthRate` per client address; 1 % of its 200s
        and every refusal are logged.
      '';
    };

    healthRate = mkOption {
      type = types.strMatching "[0-9]+r/[sm]";
      default = "5r/s";
      description = "Requests per second (`r/s`) or minute (`r/m`) to `/health` of one client address (burst 10); more get 429.";
    };

    allowFrom = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [
        "10.0.0.0/8"
        "192.168.0.0/16"
      ];
      description = "Client addresses allowed (nginx `allow`); others get 403. Empty: any address.";
    };

    upstreams = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            address = mkOption {
              type = types.str;
              example = "10.0.0.2:8000";
              description = ''
                `host:port` of a station: this station's vLLM on loopback (plain HTTP), or a station's
                `stationListener` (TLS, with `stationTls`; every station then, this one through its own
                listener: nginx speaks one scheme to a pool). Another host in plain HTTP is refused.
              '';
            };
            weight = mkOption {
              type = types.ints.positive;
              default = 1;
              description = "Relative share of the requests (nginx `weight=`), for stations of unequal capacity.";
            };
          };
        }
      );
      default = lib.optionalAttrs (serve.enable && !serve.headless) {
        local.address = localVllm;
      };
      defaultText = literalExpression ''{ local.address = lib.removePrefix "http://" config.services.vllm-station.serve.clientUrl; }'';
      description = ''
        The stations behind the gateway, by name; by default this station's vLLM. Setting it replaces
        that default: list this station too (`local.address = "127.0.0.1:8000"`) to keep it. Other
        stations' vLLM listen on a private address with their own `serve.apiKeyFile` (see
        `upstreamApiKeyFile`).
      '';
    };

    balancing = mkOption {
      type = types.enum [
        "least-conn"
        "round-robin"
      ];
      default = "least-conn";
      description = ''
        How requests are spread: `least-conn` sends each to the station with the fewest requests in
        flight (weighted), which suits requests of very unequal length; `round-robin` takes turns by weight.
      '';
    };

    affinity.header = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "X-Session-ID";
      description = ''
        Requests carrying this header go to the station a consistent hash of its value picks, so a long
        conversation finds its prefix cache (re-prefilling 1M tokens elsewhere takes minutes); when that
        station is down they move to the next one on the ring. Requests without it are balanced as usual.
      '';
    };

    passiveHealth = {
      maxFails = mkOption {
        type = types.ints.positive;
        default = 1;
        description = "Failed connections (within `failTimeout`) that take a station out (`max_fails`).";
      };
      failTimeout = mkOption {
        type = types.ints.positive;
        default = 30;
        description = "Seconds a failed station stays out before it is tried again (`fail_timeout`).";
      };
    };

    connectTimeout = mkOption {
      type = types.ints.positive;
      default = 5;
      description = "Seconds to connect to a station before trying the next one.";
    };

    readTimeout = mkOption {
      type = types.ints.positive;
      default = 3600;
      description = ''
        Seconds nginx waits between two reads from a station (`proxy_read_timeout`): the first token
        of a 1M-token prompt can take minutes of prefill, and a non-streamed answer arrives only at its end.
      '';
    };

    upstreamApiKeyFile = mkOption {
      type = types.nullOr types.str;
      default = serve.apiKeyFile;
      defaultText = literalExpression "config.services.vllm-station.serve.apiKeyFile";
      description = ''
        File holding the key the gateway sends to the stations (`Authorization: Bearer …`) in place of
        the client's, loaded at start; null: no `Authorization` header goes to the stations.
      '';
    };

    stationTls = {
      enable = mkEnableOption ''
        TLS to the stations (`https` to every upstream, each a `services.vllm-station.stationListener`):
        their certificate verified against `caFile` for `serverName`, the gateway's own client
        certificate presented (mutual TLS). Required as soon as an upstream is another host'';
      caFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-gateway/stations-ca.pem";
        description = "CA certificate(s) (PEM) that signed the stations' listener certificates (`proxy_ssl_trusted_certificate`).";
      };
      serverName = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "stations.vllm.internal";
        description = ''
          The name every station's certificate must carry (`proxy_ssl_name`, sent as SNI). One name
          for all: nginx verifies per pool, not per server of it.
        '';
      };
      certificateFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-gateway/client.pem";
        description = "The gateway's client certificate (PEM) for the stations' listeners (`proxy_ssl_certificate`).";
      };
      keyFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/vllm-station-gateway/client-key.pem";
        description = "Private key of `certificateFile`, outside the Nix store, readable by nginx's user.";
      };
    };

    extraConfig = mkOption {
      type = types.lines;
      default = "";
      description = "More nginx directives for the gateway's `server` block.";
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open `port` (and 80 with `tls.acme`) in `networking.firewall.allowedTCPPorts`.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = !serve.enable || serve.headless || contract.isLoopback serve.host;
        message = "services.vllm-station.gateway: vLLM listens on ${serve.host}, where clients can bypass the gateway's keys and limits; set services.vllm-station.serve.host = \"127.0.0.1\".";
      }
      {
        assertion = !serve.enable || !serve.openFirewall;
        message = "services.vllm-station.gateway: the gateway is the station's endpoint; set services.vllm-station.serve.openFirewall = false (and gateway.openFirewall = true).";
      }
      {
        assertion = cfg.keys != { } || cfg.keysDirectory != null;
        message = "services.vllm-station.gateway: no API keys; declare keys.<name>.file = \"${contract.secretsDir}/…\" or keysDirectory.";
      }
      {
        assertion = cfg.tls.acme != (cfg.tls.certificateFile != null && cfg.tls.keyFile != null);
        message = "services.vllm-station.gateway: TLS needs either tls.acme = true or both tls.certificateFile and tls.keyFile (not both ways).";
      }
      {
        assertion = (cfg.tls.certificateFile == null) == (cfg.tls.keyFile == null);
        message = "services.vllm-station.gateway: set tls.certificateFile and tls.keyFile together.";
      }
      {
        assertion = lib.all isSecretPath (
          [
            cfg.tls.keyFile
            cfg.keysDirectory
            cfg.upstreamApiKeyFile
          ]
          ++ lib.mapAttrsToList (_: k: k.file) cfg.keys
        );
        message = "services.vllm-station.gateway: tls.keyFile, keys.<name>.file, keysDirectory and upstreamApiKeyFile must be absolute paths outside the Nix store (the store is world-readable).";
      }
      {
        assertion = !lib.any reservedName (lib.attrNames cfg.keys) && caseCollisions == [ ];
        message = "services.vllm-station.gateway.keys: rename ${
          lib.concatStringsSep ", " (lib.filter reservedName (lib.attrNames cfg.keys) ++ caseCollisions)
        }: a key name is none of nginx's map keywords (${lib.concatStringsSep ", " mapKeywords}) and differs from every other name in more than case.";
      }
      {
        assertion = !verboseErrorLog;
        message = "services.vllm-station.gateway: services.nginx.logError = \"${nginx.logError}\" logs request headers, the clients' API keys among them; use level notice or above (e.g. \"stderr notice\").";
      }
      {
        assertion = lib.all (p: builtins.match "/[A-Za-z0-9/_.-]*" p != null && !lib.hasPrefix internalPrefix p && !lib.elem p cfg.paths && p != "/health") cfg.operatorPaths;
        message = "services.vllm-station.gateway.operatorPaths: absolute URL paths (A-Z a-z 0-9 / _ . -), not under ${internalPrefix}, and none of `paths` or /health.";
      }
      {
        assertion = lib.all validName (lib.attrNames cfg.keys);
        message = "services.vllm-station.gateway: key names are 1-64 characters of A-Z a-z 0-9 _ - (got ${
          lib.concatStringsSep ", " (lib.filter (n: !validName n) (lib.attrNames cfg.keys))
        }).";
      }
      {
        assertion = cfg.stationTls.enable || remoteUpstreams == { };
        message = "services.vllm-station.gateway.upstreams: ${
          lib.concatStringsSep ", " (lib.mapAttrsToList (n: u: "${n} (${u.address})") remoteUpstreams)
        } would be reached in plain HTTP, so anyone on that network can read and send to the station; run services.vllm-station.stationListener on each station (TLS, reachable from this gateway only), point the upstream at it and set gateway.stationTls (enable, caFile, serverName, certificateFile, keyFile).";
      }
      {
        assertion = !cfg.stationTls.enable || plainLocal == { };
        message = "services.vllm-station.gateway.upstreams: ${lib.concatStringsSep ", " (lib.attrNames plainLocal)} is this station's vLLM (${localVllm}) in plain HTTP, but with stationTls the gateway speaks TLS to every station (one scheme a pool); enable services.vllm-station.stationListener on this station and set the upstream to its address (e.g. \"127.0.0.1:8443\").";
      }
      {
        assertion =
          !cfg.stationTls.enable
          || lib.all (v: v != null) [
            cfg.stationTls.caFile
            cfg.stationTls.serverName
            cfg.stationTls.certificateFile
            cfg.stationTls.keyFile
          ];
        message = "services.vllm-station.gateway.stationTls: set caFile (the stations' CA), serverName (the name their certificates carry), certificateFile and keyFile (the gateway's client certificate).";
      }
      {
        assertion = !cfg.stationTls.enable || isSecretPath cfg.stationTls.keyFile && cfg.stationTls.keyFile != null;
        message = "services.vllm-station.gateway.stationTls.keyFile must be an absolute path outside the Nix store (the store is world-readable).";
      }
      {
        assertion = cfg.upstreams != { };
        message = "services.vllm-station.gateway: no upstreams; enable services.vllm-station.serve on this station or list other stations in gateway.upstreams.";
      }
      {
        assertion = cfg.affinity.header == null || builtins.match "[A-Za-z0-9-]+" cfg.affinity.header != null;
        message = "services.vllm-station.gateway: affinity.header must be a header name (letters, digits, -), e.g. \"X-Session-ID\".";
      }
      {
        assertion = lib.all (p: builtins.match "/[A-Za-z0-9/_.-]*" p != null && !lib.hasPrefix internalPrefix p) cfg.paths;
        message = "services.vllm-station.gateway: paths are absolute URL paths (A-Z a-z 0-9 / _ . -), e.g. \"/v1/responses\", and not under ${internalPrefix}.";
      }
    ];

    services.nginx = {
      enable = true;
      # One process serves every stream; 1,024 connections (nginx's default) is 512 proxied requests.
      eventsConfig = lib.mkDefault "worker_connections 8192;";
      appendConfig = "worker_rlimit_nofile 16384;";
      commonHttpConfig = httpConfig;

      upstreams.${pool} = {
        servers = upstreamServers;
        extraConfig =
          ''
            zone ${pool} 64k;
          ''
          + optionalString (cfg.balancing == "least-conn") "least_conn;\n"
          + upstreamKeepalive;
      };
      upstreams.${affinityPool} = lib.mkIf (cfg.affinity.header != null) {
        servers = upstreamServers;
        extraConfig =
          ''
            zone ${affinityPool} 64k;
            hash ${sessionVar} consistent;
          ''
          + upstreamKeepalive;
      };

      virtualHosts.${vhost} = {
        inherit (cfg) serverName;
        listen =
          [
            {
              addr = cfg.host;
              inherit (cfg) port;
              ssl = true;
            }
          ]
          ++ optional cfg.tls.acme {
            addr = cfg.host;
            port = 80;
          };
        onlySSL = !cfg.tls.acme;
        forceSSL = cfg.tls.acme;
        enableACME = cfg.tls.acme;
        extraConfig = serverConfig;
        locations =
          {
            "/".return = "404";
          }
          // pathLocations
          // healthLocation
          // groupLocations
          // errorLocations;
      } // lib.optionalAttrs (!cfg.tls.acme && cfg.tls.certificateFile != null) {
        sslCertificate = cfg.tls.certificateFile;
        sslCertificateKey = cfg.tls.keyFile;
      };
    };

    # A switch that changes the gateway's nginx configuration (a key added, a limit changed) reloads
    # nginx instead of restarting it: streams in flight complete.
    services.nginx.enableReload = lib.mkDefault true;

    services.vllm-station.secrets.units.${keysUnit} = secretFiles;

    systemd.services.${keysUnit} = {
      description = "API keys of the vllm-station gateway, for nginx";
      before = [ "nginx.service" ];
      # A restart of nginx reads the keys again first. A rotation is `systemctl restart
      # vllm-station-gateway-keys`: the maps are written, then nginx reloads (ExecStartPost).
      # Following the station key, it is also part of the serving unit and wanted by it: `PartOf` carries
      # that unit's stop and restart here, and only `wantedBy` brings it back with a plain `systemctl start`
      # after a `stop` (else nginx would keep the old upstream key: every request through it 401).
      wantedBy = [ "nginx.service" ] ++ optional followsStationKey "${contract.unit}.service";
      after = secretsCheck;
      requires = secretsCheck;
      partOf = [ "nginx.service" ] ++ optional followsStationKey "${contract.unit}.service";
      serviceConfig = hardening.base // {
        Type = "oneshot";
        RemainAfterExit = true;
        # The file is nginx's to read (its master process runs as this user) and no one else's.
        User = nginx.user;
        Group = nginx.group;
        RuntimeDirectory = lib.removePrefix "/run/" runtimeDir;
        RuntimeDirectoryMode = "0700";
        # A restart that fails (a bad key file) leaves the last good maps for nginx's next reload.
        RuntimeDirectoryPreserve = true;
        LoadCredential = unit.loadCredential credentialList;
        ExecStart = keysCommand;
        # Only after ExecStart succeeded: a bad key file reloads nothing (nginx keeps the keys it has).
        ExecStartPost = reloadNginx;
      };
    };

    networking.firewall.allowedTCPPorts = lib.mkIf cfg.openFirewall ([ cfg.port ] ++ optional cfg.tls.acme 80);
  };
}
