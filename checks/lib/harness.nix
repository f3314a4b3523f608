# Test harness for the module tests: evaluates modules/ with nixpkgs lib and stubs for the NixOS
# options the modules set (systemd, networking, users, virtualisation, hardware, boot, environment,
# assertions, warnings). The stubs are deliberately loose — attrsets merge, lists concatenate —
# the full NixOS evaluations in checks/nixos/ check the real option types.
#
# A test is one of:
#   h.check  [ modules… ] (config: [ problems… ])    # passes when no assertion fails and no problem
#   h.assertionFails [ modules… ] "message part"      # passes when a failed assertion contains it
#   h.throws [ modules… ]                             # passes when evaluating the unit throws (type errors)
# Problems come from h.eq / h.ok / h.contains / h.lacks (each gives [] or [ "message" ]).
# Helpers: h.unit config (systemd.services.vllm-station), h.argv execLine (an escaped Exec*
# line back into its argument list), h.fake (fake derivations), h.image (a digest-pinned image).
{ lib }:
let
  inherit (lib) mkOption types;
  helpers = import ../helpers.nix { inherit lib; };

  fakeDrv =
    name: mainProgram:
    {
      type = "derivation";
      inherit name;
      outPath = "/nix/store/00000000000000000000000000000000-${name}";
      drvPath = "/nix/store/00000000000000000000000000000000-${name}.drv";
      meta = { inherit mainProgram; };
    };

  fake = {
    station = fakeDrv "vllm-station" "station";
    vllm = fakeDrv "vllm" "vllm";
    docker = fakeDrv "docker" "docker";
    podman = fakeDrv "podman" "podman";
    systemd = fakeDrv "systemd" "systemctl";
  };

  # Loose stand-in for NixOS option types: attrsets merge recursively (with priorities),
  # lists concatenate, anything else must be equal.
  stubType = types.mkOptionType {
    name = "stub";
    description = "test stub";
    check = _: true;
    merge =
      loc: defs:
      let
        values = map (def: def.value) defs;
      in
      if lib.all (v: lib.isAttrs v && !lib.isDerivation v) values then
        (types.attrsOf stubType).merge loc defs
      else if lib.all lib.isList values then
        lib.concatLists values
      else
        lib.mergeEqualOption loc defs;
  };

  freeform =
    extraOptions:
    mkOption {
      type = types.submodule {
        freeformType = types.attrsOf stubType;
        options = extraOptions;
      };
      default = { };
    };
  linesOption = mkOption {
    type = types.lines;
    default = "";
  };

  # systemd.escapeSystemdExecArgs as nixos/lib/utils.nix defines it (JSON-quoted, % and $ doubled).
  utils = {
    escapeSystemdExecArgs = lib.concatMapStringsSep " " (
      arg: lib.replaceStrings [ "%" "$" ] [ "%%" "$$" ] (builtins.toJSON (toString arg))
    );
  };

  pkgs = {
    callPackage = _: _: throw "pkgs.callPackage is not available in the lib-only module tests";
    python3Packages.vllm = fake.vllm;
    rsync = fakeDrv "rsync" "rsync";
  };

  stubModule = {
    options = {
      assertions = mkOption {
        type = types.listOf types.unspecified;
        default = [ ];
      };
      warnings = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      systemd = freeform {
        # systemd's package: units call its `systemctl` (download.nix starts the serving unit).
        package = mkOption {
          type = stubType;
          default = fake.systemd;
        };
        services = mkOption {
          type = types.attrsOf (
            types.submodule {
              freeformType = types.attrsOf stubType;
              options.script = linesOption;
            }
          );
          default = { };
        };
      };
      networking = freeform {
        firewall = freeform {
          extraCommands = linesOption;
          extraStopCommands = linesOption;
          extraInputRules = linesOption;
        };
      };
      boot = freeform { extraModprobeConfig = linesOption; };
      users = freeform { };
      virtualisation = freeform { };
      hardware = freeform { };
      environment = freeform { };
      services.nginx = freeform { }; # gateway.nix builds on nixpkgs' nginx
      services.prometheus = freeform { }; # monitoring.nix builds on nixpkgs' prometheus and its exporters
      services.grafana = freeform { }; # monitoring.nix provisions its dashboard
    };
    config = {
      _module.args = { inherit pkgs utils; };
      services.vllm-station.package = lib.mkDefault fake.station;
      virtualisation.docker.package = lib.mkDefault fake.docker;
      virtualisation.podman.package = lib.mkDefault fake.podman;
      systemd.package = lib.mkDefault fake.systemd; # the gateway's keys unit reloads nginx through systemctl
      # NixOS derives it from networking.hostName; the gateway's `serverName` defaults to it. `h.throws`
      # forces every option, and Nix walks an attrset in the order its names were first seen in the
      # evaluation (not by name): without it, a test could meet this missing value before its throw.
      networking.fqdnOrHostName = lib.mkDefault "station.test";
    };
  };

  eval =
    modules:
    lib.evalModules {
      modules = [
        stubModule
        ../../modules/default.nix
      ] ++ modules;
    };

  show = value: builtins.toJSON value;
  failedAssertions = config: map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);

  problemsOf =
    test:
    let
      config = (eval test.modules).config;
      failed = failedAssertions config;
    in
    if test.kind == "assertion" then
      lib.optional (!lib.any (lib.hasInfix test.expect) failed)
        "expected a failed assertion containing ${show test.expect}; failed assertions: ${show failed}"
    else if test.kind == "throws" then
      let
        r = builtins.tryEval (builtins.deepSeq (test.force config) true);
      in
      lib.optional r.success "expected the evaluation to throw, but it succeeded"
    else
      lib.optional (failed != [ ]) "unexpected failed assertions: ${show failed}" ++ test.check config;
in
rec {
  inherit fake utils eval;

  image = "vllm/vllm-openai@sha256:${lib.strings.replicate 64 "a"}";

  check = modules: check: {
    kind = "check";
    inherit modules check;
  };
  assertionFails = modules: expect: {
    kind = "assertion";
    inherit modules expect;
  };
  throws = modules: {
    kind = "throws";
    inherit modules;
    # Option values are type-checked when read: read them all, and the unit if there is one.
    force = config: [
      config.services.vllm-station
      (config.systemd.services.vllm-station.serviceConfig.ExecStart or null)
    ];
  };

  eq = what: actual: expected: lib.optional (actual != expected) "${what}: expected ${show expected}, got ${show actual}";
  ok = what: cond: lib.optional (!cond) what;
  contains = what: list: elem: lib.optional (!lib.elem elem list) "${what}: ${show elem} missing from ${show list}";
  lacks = what: list: elem: lib.optional (lib.elem elem list) "${what}: ${show elem} must not be in ${show list}";

  unit = config: config.systemd.services.vllm-station;

  # /etc/vllm-station/preflight.json as the modules render it.
  preflightJson =
    config:
    builtins.fromJSON (
      builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/preflight.json".text
    );

  # The warnings, less those containing `part` (one a test's setup causes on purpose).
  warningsBut = part: config: lib.filter (w: !lib.hasInfix part w) config.warnings;

  inherit (helpers) argv flagValue;

  run =
    name: test:
    let
      r = builtins.tryEval (
        let
          p = problemsOf test;
        in
        builtins.deepSeq p p
      );
    in
    if r.success then
      r.value
    else
      [
        "evaluation error; see it with: nix-instantiate --eval --strict --json checks/lib --argstr nixpkgsLib \"$NIXPKGS_LIB\" --argstr only ${name} --show-trace"
      ];

  runUncaught = name: test: {
    inherit name;
    problems = problemsOf test;
  };
}
