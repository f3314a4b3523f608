# The system tier's input: what NixOS renders for one example station, as plain data, so that a real
# systemd can run it (checks/test_system.py). Builds nothing.
#
#   nix-instantiate --eval --strict --json checks/system/render.nix \
#     --argstr nixosTree "$NIXOS_TREE" --argstr example flash-station --argstr image REF@sha256:… \
#     [--argstr hubEndpoint http://127.0.0.1:P] [--argstr memlock BYTES] [--argstr revision 40HEX]
#     [--argstr prefetch 40HEX] [--arg gateway true]
#
# The example is evaluated as it is, plus the test-only definitions below (each says why).
# Evaluate with --read-write-mode: the harness reads the derivations the texts name (`nix derivation show`).
#
# Result:
#   units    { "<unit name>" = text; }      every unit the project's modules own (vllm-station*), but the gateway's
#   etc      { "<path under /etc>" = text; } the files those units read (vllm-station/*)
#   users    [ { name; group; uid?; isSystemUser; } ] the accounts the units run as
#   groups   [ name ]
#   tmpfiles [ "d /path mode user group -" ]  the project's tmpfiles.d lines (and the `L+` link to the
#                                            `station` package that the serving unit's steps run)
#   links    { "<path under /etc>" = "/nix/store/…"; } /etc entries NixOS links to a store file (nginx.conf)
#   drvs     [ "/nix/store/….drv" ]          the derivations the texts refer to (their string context):
#                                            the harness maps each output to what it holds
#
# With `--arg gateway true` the gateway runs too: nginx's units as nixpkgs renders them (nginx.service,
# nginx-config-reload.service), the gateway's keys unit, nginx's account and /etc/nginx/nginx.conf.
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  example,
  system ? builtins.currentSystem,
  image,
  hubEndpoint ? "",
  memlock ? "",
  # An operator's change under test: every download entry pinned to this revision (a checkpoint upgrade).
  revision ? "",
  # The first half of a checkpoint upgrade: every download entry prefetches this revision beside its pin.
  prefetch ? "",
  # Run the gateway as well: nginx (Debian's, with the configuration NixOS renders) and its keys unit.
  gateway ? false,
}:
let
  inherit (import ../nixos/eval.nix { inherit nixosTree; }) lib evalExample;
  file = ../examples + "/${example}.nix";

  # ---- test-only definitions: the only differences from the example, each with its reason ----
  testOnly =
    { lib, ... }:
    {
      services.vllm-station.serve = {
        # The CDI device (`--device nvidia.com/gpu=all`) needs a GPU and NVIDIA's container toolkit.
        gpuDevices = lib.mkForce [ ];
        # The test image (station simulate behind `vllm serve`'s arguments), by digest, in the local registry.
        image = lib.mkForce image;
      };
    };
  # With `gateway`: what nixpkgs renders for the nginx the machine runs (Debian's).
  nginxStandIn = lib.optional gateway ../nixos/debian-nginx.nix;
  # Read from a first evaluation, so the second can rewrite single values without recursion.
  first = (evalExample ([ file testOnly ] ++ nginxStandIn) system).config;
  environmentOnly = lib.mkMerge [
    # This sandbox has no CAP_SYS_RESOURCE: memlock cannot be raised above its hard limit (`memlock`),
    # so the unit and its container get that limit instead of "unlimited".
    # And no RDMA device: the pair's `--device /dev/infiniband` is dropped (it needs the ConnectX rail).
    (lib.mkIf (memlock != "" && first.services.vllm-station.serve.inputs.unlimitedMemlock) {
      services.vllm-station.serve.inputs.unlimitedMemlock = lib.mkForce false;
      systemd.services.vllm-station.serviceConfig.LimitMEMLOCK = memlock;
      services.vllm-station.serve.containerOptions = [ "--ulimit=memlock=${memlock}:${memlock}" ];
    })
    { services.vllm-station.serve.inputs.devices = lib.mkForce [ ]; }
    # A pair's RDMA checks need the ConnectX HCA and unlimited memlock: every other preflight check runs.
    (lib.mkIf first.services.vllm-station.pair.enable {
      services.vllm-station.serve.preflight.only = lib.mkForce [
        "numa" "page-cache" "host-memory" "gpu" "model" "disk" "port" "image" "kv-cache"
        "rail-link" "rail-mtu" "rail-peer" "pair-revision"
      ];
    })
    # The worker's copy from the head is slowed down enough to be interrupted midway (the resume test).
    {
      services.vllm-station.download.models = lib.mapAttrs (_: m: {
        copyBandwidthLimit = lib.mkIf (m.copyFrom != null) "4M";
      }) first.services.vllm-station.download.models;
    }
    (lib.mkIf (prefetch != "") {
      services.vllm-station.download.models = lib.mapAttrs (_: _: {
        prefetch = [ prefetch ];
      }) first.services.vllm-station.download.models;
    })
    (lib.mkIf (revision != "") {
      services.vllm-station.download.models = lib.mapAttrs (_: _: {
        revision = lib.mkForce revision;
      }) first.services.vllm-station.download.models;
    })
    # Where the test's hub listens (downloads go to a local fake of the Hugging Face Hub API).
    (lib.mkIf (hubEndpoint != "") {
      services.vllm-station.download.models = lib.mapAttrs (_: _: {
        environment.HF_ENDPOINT = hubEndpoint;
      }) first.services.vllm-station.download.models;
    })
  ];
  config = (evalExample ([ file testOnly { config = environmentOnly; } ] ++ nginxStandIn) system).config;

  ours = name: lib.hasPrefix "vllm-station" name;
  # The gateway's unit (its API keys, for nixpkgs' nginx) is left out: this tier runs the serving units
  # under systemd; the gateway — nginx with its keys step — is run by checks/test_gateway*.py with
  # Debian's nginx and the configuration NixOS renders. The machine has no nginx to require it.
  gatewayUnit = name: lib.hasPrefix "vllm-station-gateway" name;
  # With `gateway`: the gateway's units and nixpkgs' nginx units run too (nginx is Debian's program).
  nginxUnits = [
    "nginx.service"
    "nginx-config-reload.service"
  ];
  wanted =
    name:
    if gateway then ours name || lib.elem name nginxUnits else ours name && !gatewayUnit name;
  units = lib.mapAttrs (_: u: u.text) (
    lib.filterAttrs (name: u: wanted name && u.enable && u ? text) config.systemd.units
  );
  # /etc entries that are links to a store file (nixpkgs' nginx with enableReload: /etc/nginx/nginx.conf)
  links = lib.mapAttrs (_: e: "${e.source}") (
    lib.filterAttrs (name: e: gateway && name == "nginx/nginx.conf" && e.enable) config.environment.etc
  );
  etcEntries = lib.filterAttrs (name: e: ours name && e.enable) config.environment.etc;
  etc = lib.mapAttrs (
    name: e:
    if e.text != null then e.text else throw "environment.etc.${name} has no text (a source file): not supported"
  ) etcEntries;
  failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
  # the project's tmpfiles lines: directories, and the link the serving unit runs `station` through
  tmpfiles = lib.filter (lib.hasInfix "vllm-station") config.systemd.tmpfiles.rules;
  texts = lib.attrValues units ++ lib.attrValues etc ++ tmpfiles ++ lib.attrValues links;
  context = lib.foldl' (acc: t: acc // builtins.getContext t) { } texts;
  users = lib.mapAttrsToList (name: u: {
    inherit name;
    inherit (u) group isSystemUser uid;
  }) (lib.filterAttrs (name: u: ours name || (gateway && name == "nginx")) config.users.users);
in
if failed != [ ] then
  throw "assertions failed:\n${lib.concatStringsSep "\n" failed}"
else
  {
    units = lib.mapAttrs (_: builtins.unsafeDiscardStringContext) units;
    etc = lib.mapAttrs (_: builtins.unsafeDiscardStringContext) etc;
    inherit users;
    # the project's tmpfiles lines (systemd-tmpfiles --create runs them in the machine)
    tmpfiles = map builtins.unsafeDiscardStringContext tmpfiles;
    groups = lib.attrNames (lib.filterAttrs (name: _: ours name || (gateway && name == "nginx")) config.users.groups);
    links = lib.mapAttrs (_: builtins.unsafeDiscardStringContext) links;
    drvs = lib.attrNames (lib.filterAttrs (_: c: c ? outputs) context);
  }
