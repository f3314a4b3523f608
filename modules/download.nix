# services.vllm-station.download: one oneshot unit per model that fetches a pinned revision with
# `station download` bound to NUMA node 0 (systemd's own NUMAPolicy, so the page cache of a 464 GB
# download never lands in the GPU's HBM on node 1), then verifies it and writes the stamp
# `.station-verified.json`. The serving unit refuses to start on a local model without that stamp
# (its start sequence, serve.nix); this module feeds it the expected revision, the revision's
# directory and the unit names through `serve.inputs.checkpoint` and never edits the serving unit itself.
#
# Revisions (docs/download.md): revision R of entry `<name>` lives in `<dir>/revisions/R`
# (contract.revisionDir) with its own stamp, so a new pin is fetched beside the revisions already on disk
# and setting the pin back finds the old one verified (no download). The unit is skipped while the
# pinned revision's stamp exists. The serving unit is skipped until that stamp exists (the first switch
# returns without waiting for the download); after a fetch and its verification, this unit's last step
# starts it (`systemctl start --no-block`, see `startServingArgs` for why not `OnSuccess=`). Before that,
# `station revisions prune` keeps the pinned revision and the `keepRevisions` newest verified ones and
# deletes the older ones. An upgrade with the engine serving throughout lists the next revision in
# `prefetch` first: its own unit (`vllm-station-prefetch-<name>`) fetches and verifies it beside the pin
# without touching the serving unit; pinning it afterwards restarts the engine onto it, nothing to fetch.
#
# Checkpoints live under /var/lib/vllm-station-models, not in the serving unit's StateDirectory
# (/var/lib/vllm-station): systemd chowns a StateDirectory to its unit's user, recursively when the
# owner changes (the native backend runs under a DynamicUser), and two units with different users
# would hand 464 GB back and forth. The serving module mounts a model path outside its state
# directory read-only into the container.
{
  config,
  lib,
  pkgs,
  utils,
  ...
}:
let
  inherit (lib)
    mkOption
    mkEnableOption
    mkIf
    types
    literalExpression
    ;

  top = config.services.vllm-station;
  cfg = top.download;
  serve = top.serve or { };

  contract = import ./lib/contract.nix;
  hardening = import ./lib/hardening.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };
  inherit (contract) stampName modelsRoot stampOf;
  # Where the pinned revision of an entry lives (a `verifyOnly` entry without a revision: `dir` itself).
  checkpointDir = m: if m.revision != null then contract.revisionDir m.dir m.revision else m.dir;
  cacheRoot = contract.downloadCacheDir;
  unitName = contract.downloadUnit;

  enabledModels = lib.filterAttrs (_: m: m.enable) cfg.models;
  # A preset's entries are defaults of their own option, so that a user's `expectations` (any entry)
  # does not discard them (a preset sets its values with mkDefault, and a plain definition of an
  # option drops every mkDefault definition of it).
  # Field by field: a value the user sets wins, the preset's fills the rest.
  fieldOf = set: repo: key: (set.${repo} or { }).${key} or null;
  expectationsFor =
    repo: key:
    let
      own = fieldOf cfg.expectations repo key;
    in
    if own != null then own else fieldOf cfg.presetExpectations repo key;

  expectationModule = {
    options = {
      arch = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "An entry `config.json`'s `architectures` must contain.";
      };
      quantAlgo = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "The expected `quantization_config.quant_algo`.";
      };
      shards = mkOption {
        type = types.nullOr types.ints.positive;
        default = null;
        description = "The expected number of safetensors shards.";
      };
    };
  };

  modelModule =
    { name, config, ... }:
    {
      options = {
        enable = mkOption {
          type = types.bool;
          default = true;
          description = "Whether to render the unit `vllm-station-download-${name}` for this model.";
        };

        model = mkOption {
          type = types.str;
          default =
            cfg.presetModels.${name}
              or (throw "services.vllm-station.download.models.${name}.model: set the Hugging Face repository id to download (e.g. \"nvidia/GLM-5.3-NVFP4\")");
          defaultText = literalExpression "the preset's repository for an entry of that name, else required";
          example = "nvidia/GLM-5.3-NVFP4";
          description = ''
            Hugging Face repository id to download. A preset names the entry its model is served from
            (`glm53-flash`, `glm53`) and fills this in for that entry.
          '';
        };

        revision = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "0123456789abcdef0123456789abcdef01234567";
          description = ''
            The revision to fetch: a 40-hex commit id. A branch or tag moves under you and is refused
            unless {option}`allowBranch` is set. Required for a download; for a `verifyOnly` entry it
            is the revision the serving unit expects the stamp to record (null: not checked).
          '';
        };

        allowBranch = mkOption {
          type = types.bool;
          default = false;
          description = "Accept a moving {option}`revision` (branch or tag); passes `--allow-branch`.";
        };

        dir = mkOption {
          type = types.str;
          default = "${modelsRoot}/${name}";
          defaultText = literalExpression ''"/var/lib/vllm-station-models/''${name}"'';
          description = ''
            The entry's directory. Revision R is written to and verified in
            `<dir>/${contract.revisionsDirName}/R`, with its stamp `<dir>/${contract.revisionsDirName}/R/${stampName}`
            (a `verifyOnly` entry without a {option}`revision`: `<dir>` itself). Point
            {option}`services.vllm-station.serve.model` here to serve it: the serving unit serves the
            pinned revision's directory.
          '';
        };

        prefetch = mkOption {
          type = types.listOf (types.strMatching "[0-9a-f]{40}");
          default = [ ];
          example = [ "89abcdef0123456789abcdef0123456789abcdef" ];
          description = ''
            Revisions to fetch and verify beside the pinned one without serving them: the first half of
            a checkpoint upgrade with the engine still serving (docs/download.md). Each goes to
            `<dir>/${contract.revisionsDirName}/R` with its stamp, by its own unit
            `vllm-station-prefetch-<name>` (bound to the same NUMA nodes; it never touches the serving
            unit). Once it is verified, pin it ({option}`revision`): that switch restarts the engine on it
            at once, nothing left to download. Kept by `revisions prune` while listed.
          '';
        };

        keepRevisions = mkOption {
          type = types.ints.positive;
          default = cfg.keepRevisions;
          defaultText = literalExpression "config.services.vllm-station.download.keepRevisions";
          description = ''
            Verified revisions kept under `<dir>/${contract.revisionsDirName}` after a new one is
            fetched: the pinned one and the newest others (by the time their stamp records), up to
            this many; older ones are deleted (`station revisions prune`). The pinned revision is
            never deleted.
          '';
        };

        include = mkOption {
          type = types.listOf types.str;
          default = [ ];
          example = [
            "*.safetensors"
            "*.json"
          ];
          description = "Glob patterns passed as `--include`; empty downloads the whole repository.";
        };

        tokenFile = mkOption {
          # A string, not a path: a `./hf-token` path literal would be copied into the world-readable store.
          type = types.nullOr types.str;
          default = null;
          example = "/run/secrets/hf-token";
          description = ''
            File holding a Hugging Face token (gated repositories). It is handed to the unit with
            systemd's `LoadCredential=`, so it may stay readable by root only and never enters the
            Nix store.
          '';
        };

        copyFrom = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "rsync://192.168.100.1:8730/glm53";
          description = ''
            Copy the checkpoint from the other station instead of the hub: `station copy` pulls the
            head's share (`services.vllm-station.pair.checkpointShare`, an rsync module) over the rail,
            bound to {option}`numaNodes`, refuses a source whose stamp is missing or names another
            {option}`revision`, resumes an interrupted copy, then verifies locally and stamps.
          '';
        };

        copyBandwidthLimit = mkOption {
          type = types.nullOr (types.strMatching "[0-9]+(\\.[0-9]+)?[KMGkmg]?");
          default = null;
          example = "2G";
          description = "With {option}`copyFrom`: cap the copy's rate (`--bwlimit`, bytes/s with K/M/G), e.g. to share the rail.";
        };

        verifyOnly = mkOption {
          type = types.bool;
          default = false;
          description = ''
            Do not download: only run `station verify` on the revision's directory,
            `<dir>/${contract.revisionsDirName}/<revision>` (`dir` itself without a {option}`revision`): a copy
            synced there from the other station, e.g. with rsync under `station numa-exec --membind 0`.
            Writes the same stamp.
          '';
        };

        expectArch = mkOption {
          type = types.nullOr types.str;
          default = expectationsFor config.model "arch";
          defaultText = literalExpression ''config.services.vllm-station.download.expectations.''${model}.arch or null'';
          example = "GlmMoeDsaForCausalLM";
          description = "Expected `architectures` entry of config.json (`--expect-arch`). Presets carry it.";
        };

        expectQuantAlgo = mkOption {
          type = types.nullOr types.str;
          default = expectationsFor config.model "quantAlgo";
          defaultText = literalExpression ''config.services.vllm-station.download.expectations.''${model}.quantAlgo or null'';
          example = "MIXED_PRECISION";
          description = "Expected `quantization_config.quant_algo` (`--expect-quant-algo`).";
        };

        expectShards = mkOption {
          type = types.nullOr types.ints.positive;
          default = expectationsFor config.model "shards";
          defaultText = literalExpression ''config.services.vllm-station.download.expectations.''${model}.shards or null'';
          example = 50;
          description = "Expected number of safetensors shards (`--expect-shards`).";
        };

        sha256 = mkOption {
          type = types.bool;
          default = false;
          description = ''
            Hash every file against the hub's LFS sha256 (`--sha256`); streams the whole checkpoint
            at disk speed (still bound to {option}`numaNodes`). Without it only headers are read.
          '';
        };

        numaNodes = mkOption {
          type = types.nonEmptyListOf types.ints.unsigned;
          default = cfg.numaNodes;
          defaultText = literalExpression "config.services.vllm-station.download.numaNodes";
          description = "NUMA nodes this unit's memory (and so its page cache) is bound to.";
        };

        skipIfVerified = mkOption {
          type = types.bool;
          default = true;
          description = ''
            Skip the unit (`ConditionPathExists=!<revision's directory>/${stampName}`) once the pinned
            revision carries a stamp. Delete that stamp (or run `station verify` by hand) to force a new pass.
          '';
        };

        environment = mkOption {
          type = types.attrsOf types.str;
          default = { };
          example = {
            HF_HUB_ENABLE_HF_TRANSFER = "1";
          };
          description = "Extra environment for the download (e.g. `HF_ENDPOINT` for a mirror).";
        };
      };
    };

  # argv of the unit's one ExecStart; the verification (and the stamp) is the last step of both commands.
  commandFor =
    m:
    let
      expectations =
        lib.optionals (m.expectArch != null) [
          "--expect-arch"
          m.expectArch
        ]
        ++ lib.optionals (m.expectQuantAlgo != null) [
          "--expect-quant-algo"
          m.expectQuantAlgo
        ]
        ++ lib.optionals (m.expectShards != null) [
          "--expect-shards"
          (toString m.expectShards)
        ]
        ++ lib.optional m.sha256 "--sha256";
    in
    if m.copyFrom != null then
      [
        station
        "copy"
        m.copyFrom
        "--dir"
        (checkpointDir m)
        "--revision"
        (toString m.revision)
        "--repo"
        m.model
        "--membind"
        (nodeList m)
      ]
      ++ lib.optionals (m.copyBandwidthLimit != null) [
        "--bwlimit"
        m.copyBandwidthLimit
      ]
      ++ expectations
    else if m.verifyOnly then
      [
        station
        "verify"
        (checkpointDir m)
        # What the copy is, recorded in its stamp: the serving unit's gate compares the revision.
        "--repo"
        m.model
      ]
      ++ lib.optionals (m.revision != null) [
        "--revision"
        m.revision
      ]
      ++ expectations
    else
      [
        station
        "download"
        m.model
        "--revision"
        (toString m.revision)
        "--dir"
        (checkpointDir m)
        # The tool binds itself too (before any I/O); same nodes as the unit's NUMAMask.
        "--membind"
        (nodeList m)
      ]
      ++ lib.concatMap (g: [
        "--include"
        g
      ]) m.include
      ++ lib.optional m.allowBranch "--allow-branch"
      ++ expectations;

  # After a new revision verified: keep the pinned one and the newest `keepRevisions`, delete the rest.
  pruneArgs = m: [
    station
    "revisions"
    "prune"
    m.dir
    "--pin"
    m.revision
    "--keep"
    (toString m.keepRevisions)
  ]
  ++ lib.concatMap (r: [
    "--protect"
    r
  ]) m.prefetch;

  # The serving unit (and golive) are skipped until the served revision is stamped (serve.nix): the
  # download that stamped it starts them, after the stamp, only when the fetch and verification
  # succeeded (an ExecStartPost runs only then). Not `OnSuccess=`: systemd fires it whenever the unit
  # turns inactive, an operator's `systemctl stop` mid-download included, and the serving unit's
  # `Wants=` would then start the stopped download again (found by the system tier). `+`: starting a
  # unit is root's; `--no-block`: the engine's start (minutes) is not this unit's.
  startsServing = m: servesLocalModel && m.dir == servedModel;
  startServingArgs = [
    (lib.getExe' config.systemd.package "systemctl")
    "start"
    "--no-block"
    "${contract.unit}.service"
  ]
  ++ lib.optional (top.golive.enable or false) "${contract.goliveUnit}.service";

  nodeList = m: lib.concatMapStringsSep "," toString m.numaNodes;
  fromHub = m: !m.verifyOnly && m.copyFrom == null;

  station = lib.getExe' top.package "station";

  # The hub token, loaded as a credential (modules/lib/unit.nix renders both).
  tokenCredentials = m: lib.optional (fromHub m && m.tokenFile != null) (unit.credential "hf-token" m.tokenFile);
  execStartFor =
    m:
    unit.execLine (
      commandFor m
      ++ lib.concatMap (c: [
        "--token-file"
        (unit.credentialArg { inherit (c) name; })
      ]) (tokenCredentials m)
    );

  # The hub token, checked before the unit loads it (modules/secrets.nix): a missing file names this
  # option, not 243/CREDENTIALS.
  tokenSecrets =
    name: m:
    lib.optional (fromHub m && m.tokenFile != null) {
      option = "services.vllm-station.download.models.${name}.tokenFile";
      path = m.tokenFile;
    };
  secretsCheckFor =
    name: m: lib.optional (tokenSecrets name m != [ ]) (contract.secretsCheckUnit (unitName name));

  # The entry's `prefetch` revisions: one ExecStart each (a download into the revision's own directory),
  # run only while one of them lacks its stamp. Nothing of the serving unit's: no start, no prune (the
  # download unit's prune protects them).
  prefetchUnitFor =
    name: m:
    let
      base = unitFor name m;
      forRevision = r: m // { revision = r; };
    in
    base
    // {
      description = "vllm-station: fetch and verify ${m.model} ${lib.concatStringsSep ", " m.prefetch} beside the served revision (${name})";
      wantedBy = [ "multi-user.target" ];
      unitConfig.ConditionPathExists = map (r: "|!${stampOf (checkpointDir (forRevision r))}") m.prefetch;
      serviceConfig = base.serviceConfig // {
        ExecStartPre = [ ];
        ExecStart = map (r: execStartFor (forRevision r)) m.prefetch;
        ExecStartPost = [ ];
      };
    };
  withPrefetch = lib.filterAttrs (_: m: m.prefetch != [ ]) enabledModels;

  unitFor = name: m: {
    description = "vllm-station: ${
      if m.copyFrom != null then
        "copy from ${m.copyFrom} and verify"
      else if m.verifyOnly then
        "verify"
      else
        "download and verify"
    } ${m.model} (${name})";
    wants = lib.optional (!m.verifyOnly) "network-online.target";
    after = lib.optional (!m.verifyOnly) "network-online.target" ++ secretsCheckFor name m;
    requires = secretsCheckFor name m;
    # `station copy` runs rsync (the unit's PATH holds coreutils, findutils, grep, sed and systemd).
    path = lib.optional (m.copyFrom != null) pkgs.rsync;
    # Bounded retries: a flaky link gets `retries` tries an hour, then the unit stays failed.
    startLimitBurst = cfg.retries;
    startLimitIntervalSec = 3600;
    unitConfig = lib.optionalAttrs m.skipIfVerified { ConditionPathExists = "!${stampOf (checkpointDir m)}"; };
    environment = {
      HF_HOME = "${cacheRoot}/huggingface";
      HF_HUB_DISABLE_TELEMETRY = "1";
    }
    // m.environment;
    serviceConfig = {
      Type = "oneshot";
      # Not RemainAfterExit: done, the unit goes inactive, and the next start (the serving unit wants
      # it at each of its starts) is skipped by the stamp condition.
      # A checkpoint verified directly in `dir` (the layout before revisions) moves to its revision's
      # directory first (renames): not downloaded again after an upgrade of this module.
      ExecStartPre = lib.optional (m.revision != null) (utils.escapeSystemdExecArgs [
        station
        "revisions"
        "adopt"
        m.dir
      ]);
      ExecStart = execStartFor m;
      # `-`: housekeeping; a revision it cannot delete (files of another owner) is logged, and the
      # verified pin still counts as done.
      ExecStartPost =
        lib.optional (m.revision != null) ("-" + utils.escapeSystemdExecArgs (pruneArgs m))
        ++ lib.optional (startsServing m) ("+" + utils.escapeSystemdExecArgs (startServingArgs));
      Restart = "on-failure";
      RestartSec = cfg.restartSec;
      TimeoutStartSec = cfg.timeoutStartSec;
      User = cfg.user;
      Group = cfg.group;
      CacheDirectory = "vllm-station-download"; # its own: see the header on shared directories
      ReadWritePaths = [ m.dir ]; # the revision's directory, and the older ones prune deletes
      LoadCredential = unit.loadCredential (tokenCredentials m);

      # systemd binds the process before exec, so every page it touches (page cache included) is
      # allocated on these nodes: node 0's LPDDR on a GB300, never node 1's HBM. (set_mempolicy/mbind,
      # the tool's own `--membind`, are in @resources, part of @system-service.)
      NUMAPolicy = "bind";
      NUMAMask = nodeList m;
    }
    # The base sandbox has no GPU access at all (a private /dev without nvidia*); network is the point.
    // hardening.for [ "sharedFiles" ];
  };

  # The serving unit's model, if it is a local directory. Read defensively: `serve` may not be imported.
  servedModel = if serve ? model then serve.model else null;
  servesLocalModel = (serve.enable or false) && servedModel != null && lib.hasPrefix "/" servedModel;
  matchingDownloads = lib.filterAttrs (_: m: m.dir == servedModel) enabledModels;

  # Revisions the serving unit's checkpoint must carry (verify-only entries declare one too).
  servedRevisions = lib.unique (
    lib.filter (r: r != null) (lib.mapAttrsToList (_: m: m.revision) matchingDownloads)
  );
  inherit (unit) isSecretPath;
in
{
  options.services.vllm-station.download = {
    enable = mkEnableOption "the vllm-station checkpoint download and verification units (one per entry of `models`)";

    models = mkOption {
      type = types.attrsOf (types.submodule modelModule);
      default = { };
      example = literalExpression ''
        {
          glm53 = {
            model = "nvidia/GLM-5.3-NVFP4";
            revision = "0123456789abcdef0123456789abcdef01234567";
            expectArch = "GlmMoeDsaForCausalLM";
            expectQuantAlgo = "MIXED_PRECISION";
            expectShards = 50;
            tokenFile = "/run/secrets/hf-token";
          };
        }
      '';
      description = ''
        Checkpoints to download (or, with `verifyOnly`, only verify). Each entry renders a oneshot
        unit `vllm-station-download-<name>` bound to {option}`numaNodes` with no GPU access.
      '';
    };

    expectations = mkOption {
      type = types.attrsOf (types.submodule expectationModule);
      default = { };
      example = literalExpression ''
        {
          "nvidia/GLM-5.3-NVFP4" = {
            arch = "GlmMoeDsaForCausalLM";
            quantAlgo = "MIXED_PRECISION";
            shards = 50;
          };
        }
      '';
      description = ''
        What `station verify` expects of a repository's checkpoint, keyed by repository id. Every
        entry of {option}`models` for that repository takes them as the defaults of its `expectArch`,
        `expectQuantAlgo` and `expectShards`. A value set here wins over a preset's value for the same
        repository and field (see {option}`presetExpectations`); the preset fills the rest.
      '';
    };

    presetExpectations = mkOption {
      type = types.attrsOf (types.submodule expectationModule);
      default = { };
      internal = true;
      description = ''
        Checkpoint expectations carried by presets (`modules/presets/*.nix`, data); merged under
        {option}`expectations`.
      '';
    };

    presetModels = mkOption {
      type = types.attrsOf types.str;
      default = { };
      internal = true;
      description = ''
        Repository ids carried by presets, keyed by the `models` entry name the preset serves from
        (e.g. `glm53-flash`): the default of that entry's `model`.
      '';
    };

    numaNodes = mkOption {
      type = types.nonEmptyListOf types.ints.unsigned;
      default = [ 0 ];
      description = ''
        Default NUMA nodes for the downloads (`NUMAPolicy=bind`, `NUMAMask=`). Node 0 is the CPU's
        LPDDR on a GB300; node 1 is the GPU's HBM and must stay free of page cache.
      '';
    };

    keepRevisions = mkOption {
      type = types.ints.positive;
      default = 2;
      description = ''
        Default of every entry's `keepRevisions`: verified revisions kept on disk, the pinned one
        included. 2 keeps the one served before the last upgrade, so a rollback needs no download.
      '';
    };

    retries = mkOption {
      type = types.ints.positive;
      default = 3;
      description = "Start attempts per hour (`StartLimitBurst=`, interval 3600 s) before the unit stays failed.";
    };

    restartSec = mkOption {
      type = types.ints.unsigned;
      default = 60;
      description = "Seconds between a failed attempt and the next (`RestartSec=`).";
    };

    timeoutStartSec = mkOption {
      type = types.str;
      default = "24h";
      description = "Bound on one attempt (`TimeoutStartSec=`); 464 GB at 1 Gbit/s takes about 1 h 05 min.";
    };

    user = mkOption {
      type = types.str;
      default = "vllm-station";
      description = "User that owns the downloaded checkpoints (created when it is `vllm-station`).";
    };

    group = mkOption {
      type = types.str;
      default = "vllm-station";
      description = "Group of {option}`user` (created when it is `vllm-station`).";
    };
  };

  config = lib.mkMerge [
    (mkIf cfg.enable {
      assertions =
        lib.mapAttrsToList (name: m: {
          assertion =
            if m.revision == null then
              m.verifyOnly
            else
              m.verifyOnly || m.allowBranch || builtins.match "[0-9a-f]{40}" m.revision != null;
          message =
            if m.revision == null then
              "services.vllm-station.download.models.${name}.revision: a download needs a pinned revision (a 40-hex commit id of ${m.model})."
            else
              "services.vllm-station.download.models.${name}.revision: \"${m.revision}\" is not a 40-hex commit id; pin a commit or set allowBranch = true.";
        }) enabledModels
        ++ lib.mapAttrsToList (name: m: {
          # It names one directory, `<dir>/revisions/<revision>` (vllm_station.checkpoint.revisions accepts the same).
          assertion = m.revision == null || (builtins.match "[A-Za-z0-9._-]+" m.revision != null && m.revision != "." && m.revision != "..");
          message = "services.vllm-station.download.models.${name}.revision: \"${toString m.revision}\" cannot name a revision directory (letters, digits, '.', '_', '-'); pin the commit it resolves to.";
        }) enabledModels
        ++ lib.mapAttrsToList (name: m: {
          assertion = lib.hasPrefix "/" m.dir;
          message = "services.vllm-station.download.models.${name}.dir: \"${m.dir}\" must be an absolute path.";
        }) enabledModels
        ++ lib.mapAttrsToList (name: m: {
          assertion = m.copyFrom == null || (!m.verifyOnly && m.revision != null && builtins.match "rsync://[^/]+/[^/]+/?" m.copyFrom != null);
          message = "services.vllm-station.download.models.${name}.copyFrom: \"${toString m.copyFrom}\" needs the form rsync://HOST:PORT/MODULE, a pinned `revision` (the source's stamp must record it) and no `verifyOnly`.";
        }) enabledModels
        ++ lib.mapAttrsToList (name: m: {
          assertion = m.prefetch == [ ] || (fromHub m && !lib.elem m.revision m.prefetch);
          message = "services.vllm-station.download.models.${name}.prefetch: fetches from the hub beside the pinned revision; it needs a hub download (not copyFrom or verifyOnly) and must not list the pinned revision ${toString m.revision}.";
        }) enabledModels
        ++ lib.mapAttrsToList (name: m: {
          assertion = isSecretPath m.tokenFile;
          message = "services.vllm-station.download.models.${name}.tokenFile must be an absolute path outside the Nix store (got `${toString m.tokenFile}`): the store is world-readable. Use a string such as \"/run/secrets/hf-token\", not a ./path literal.";
        }) enabledModels;

      warnings = lib.concatLists (
        lib.mapAttrsToList (
          name: m:
          lib.optional (lib.elem 1 m.numaNodes)
            "services.vllm-station.download.models.${name}.numaNodes includes node 1: on a GB300 that is the GPU's HBM, and the download's page cache would fill it; use [ 0 ]."
        ) enabledModels
      );

      systemd.services =
        lib.mapAttrs' (name: m: lib.nameValuePair (unitName name) (unitFor name m)) enabledModels
        // lib.mapAttrs' (
          name: m: lib.nameValuePair (contract.prefetchUnit name) (prefetchUnitFor name m)
        ) withPrefetch;

      # (the prefetch unit requires the download unit's check: the same token file)
      services.vllm-station.secrets.units = lib.mapAttrs' (
        name: m: lib.nameValuePair (unitName name) (tokenSecrets name m)
      ) (lib.filterAttrs (name: m: tokenSecrets name m != [ ]) enabledModels);

      # The checkpoint directories must exist (owned by the download user, readable by the serving
      # unit) before the sandbox mounts them writable.
      systemd.tmpfiles.rules = lib.mapAttrsToList (
        _: m: "d ${m.dir} 0755 ${cfg.user} ${cfg.group} - -"
      ) enabledModels;

      users.users = mkIf (cfg.user == "vllm-station") {
        vllm-station = {
          isSystemUser = true;
          group = cfg.group;
        };
      };
      users.groups = mkIf (cfg.group == "vllm-station") { vllm-station = { }; };
    })

    # The serving unit's stamp gate (serve.nix, step 1): which revision, and which units produce it.
    (mkIf (cfg.enable && servesLocalModel) {
      services.vllm-station.serve.inputs.checkpoint = {
        units = lib.mapAttrsToList (n: _: "${unitName n}.service") matchingDownloads;
        revision = mkIf (lib.length servedRevisions == 1) (lib.head servedRevisions);
        dir = mkIf (lib.length servedRevisions == 1) (contract.revisionDir servedModel (lib.head servedRevisions));
      };
    })
  ];
}
