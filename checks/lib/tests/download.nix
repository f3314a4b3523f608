# services.vllm-station.download: the per-model oneshot unit (NUMA binding, no GPU, bounded retries,
# verification), the serving unit's dependency on the stamp, and every assertion.
{ lib, h }:
let
  # (lib.takeEnd/dropEnd are newer than the NixOS tree the flake's checks evaluate with)
  lastTwo = l: lib.sublist (lib.length l - 2) 2 l;
  dropLastTwo = l: lib.take (lib.length l - 2) l;
  rev = "0123456789abcdef0123456789abcdef01234567";
  rev2 = "89abcdef0123456789abcdef0123456789abcdef";
  dir = "/var/lib/vllm-station-models/glm53";
  # Each revision in its own directory under the entry's dir (contract.revisionDir).
  revDir = r: "${dir}/revisions/${r}";
  glm = {
    services.vllm-station.download = {
      enable = true;
      models.glm53 = {
        model = "nvidia/GLM-5.3-NVFP4";
        revision = rev;
        tokenFile = "/run/secrets/hf-token";
      };
    };
  };
  # The preset carries the checkpoint expectations; the serving unit loads the downloaded directory.
  served = [
    glm
    {
      services.vllm-station.serve = {
        enable = true;
        preset = "glm53-tp2";
        image = h.image;
        model = dir;
      };
    }
  ];
  with' = modules: extra: modules ++ [ extra ];

  unitOf = config: config.systemd.services.vllm-station-download-glm53;
  dsc = config: (unitOf config).serviceConfig;
  # The hub token through its credential (modules/lib/unit.nix): `%d` once, for systemd to expand.
  tokenArgs = [
    "--token-file"
    "%d/hf-token"
  ];
  execArgv = config: h.argv (dsc config).ExecStart;
  startArgv =
    config:
    let
      argv = execArgv config;
    in
    if lastTwo argv == tokenArgs then dropLastTwo argv else argv;
  station = "${h.fake.station}/bin/station"; # the download units: the store path (a oneshot)
  linked = "/run/vllm-station-tools/bin/station"; # the serving unit's steps: the stable link (serve.nix)
  # The download's last step when it serves the entry: `+systemctl start --no-block UNITS` (privileged),
  # as [ privileged "systemctl" "start" "--no-block" UNITS… ]; [ ] when there is none.
  startsAfter =
    config:
    let
      lines = lib.filter (l: lib.hasInfix "systemctl" l) ((dsc config).ExecStartPost or [ ]);
      line = lib.head lines;
      argv = h.argv line;
    in
    if lines == [ ] then
      [ ]
    else
      [
        (lib.hasPrefix "+" line)
        (baseNameOf (lib.head argv))
      ]
      ++ lib.tail argv;
in
{
  import-enables-nothing = h.check [ ] (
    config:
    h.eq "no download units" (lib.filter (lib.hasPrefix "vllm-station-download") (lib.attrNames config.systemd.services)) [ ]
  );

  disabled-renders-nothing = h.check [
    (lib.recursiveUpdate glm { services.vllm-station.download.enable = false; })
  ] (config: h.eq "units" (config.systemd.services ? vllm-station-download-glm53) false);

  unit-numa-bind-node-0 = h.check [ glm ] (
    config:
    h.eq "NUMAPolicy" (dsc config).NUMAPolicy "bind"
    ++ h.eq "NUMAMask" (dsc config).NUMAMask "0"
    ++ h.ok "the tool binds itself to the same nodes" (
      lib.elem "--membind" (startArgv config) && lib.elem "0" (startArgv config)
    )
  );

  unit-numa-nodes-option = h.check (with' [ glm ] { services.vllm-station.download.numaNodes = [ 0 2 ]; }) (
    config:
    h.eq "NUMAMask" (dsc config).NUMAMask "0,2"
    ++ h.ok "--membind 0,2" (lib.elem "0,2" (startArgv config))
  );

  unit-numa-per-model = h.check (with' [ glm ] { services.vllm-station.download.models.glm53.numaNodes = [ 3 ]; }) (
    config: h.eq "NUMAMask" (dsc config).NUMAMask "3"
  );

  unit-no-gpu = h.check [ glm ] (
    config:
    h.eq "DevicePolicy" (dsc config).DevicePolicy "closed"
    ++ h.eq "no DeviceAllow at all" ((dsc config) ? DeviceAllow) false
    ++ h.eq "PrivateDevices" (dsc config).PrivateDevices true
  );

  unit-oneshot-bounded-retries = h.check [ glm ] (
    config:
    let
      u = unitOf config;
    in
    h.eq "Type" (dsc config).Type "oneshot"
    ++ h.eq "not RemainAfterExit: done, it goes inactive; the next start is skipped by the condition" ((dsc config) ? RemainAfterExit) false
    ++ h.eq "Restart" (dsc config).Restart "on-failure"
    ++ h.eq "RestartSec" (dsc config).RestartSec 60
    ++ h.eq "startLimitBurst ([Unit])" u.startLimitBurst 3
    ++ h.eq "startLimitIntervalSec ([Unit])" u.startLimitIntervalSec 3600
    ++ h.eq "no StartLimit* in serviceConfig" (lib.filter (lib.hasPrefix "StartLimit") (lib.attrNames (dsc config))) [ ]
    ++ h.eq "skip once the pinned revision is verified" u.unitConfig.ConditionPathExists "!${revDir rev}/.station-verified.json"
    ++ h.contains "network" u.wants "network-online.target"
    ++ h.contains "network" u.after "network-online.target"
  );

  retries-option = h.check (with' [ glm ] { services.vllm-station.download.retries = 5; }) (
    config: h.eq "startLimitBurst" (unitOf config).startLimitBurst 5
  );

  # Expectations come from the preset (data), keyed by repository.
  command-download-with-preset-expectations = h.check served (
    config:
    h.eq "ExecStart" (startArgv config) [
      station
      "download"
      "nvidia/GLM-5.3-NVFP4"
      "--revision"
      rev
      "--dir"
      (revDir rev)
      "--membind"
      "0"
      "--expect-arch"
      "GlmMoeDsaForCausalLM"
      "--expect-quant-algo"
      "MIXED_PRECISION"
      "--expect-shards"
      "50"
    ]
    ++ h.eq "token through a credential" (lastTwo (execArgv config)) tokenArgs
    ++ h.ok "%d quoted once, not escaped to %%d" (lib.hasSuffix " \"%d/hf-token\"" (dsc config).ExecStart)
    ++ h.eq "LoadCredential" (dsc config).LoadCredential [ "hf-token:/run/secrets/hf-token" ]
    ++ h.ok "token path not in the command line" (!lib.hasInfix "/run/secrets/hf-token" (dsc config).ExecStart)
  );

  # A user's own expectations (for another repository) keep the preset's.
  preset-expectations-survive-user-entries = h.check (with' served {
    services.vllm-station.download.expectations."other/repo".shards = 3;
  }) (
    config:
    h.eq "expect-arch still from the preset" (
      lib.take 2 (lib.drop 9 (startArgv config))
    ) [
      "--expect-arch"
      "GlmMoeDsaForCausalLM"
    ]
  );

  user-expectations-override-the-preset = h.check (with' served {
    services.vllm-station.download.expectations."nvidia/GLM-5.3-NVFP4".shards = 51;
  }) (
    config:
    h.eq "expectations: the user's shards, the preset's arch and algorithm" (lib.drop 9 (startArgv config)) [
      "--expect-arch"
      "GlmMoeDsaForCausalLM"
      "--expect-quant-algo"
      "MIXED_PRECISION"
      "--expect-shards"
      "51"
    ]
  );

  command-without-preset = h.check [ glm ] (
    config:
    h.lacks "no expectations without a preset" (startArgv config) "--expect-arch"
  );

  command-options = h.check (with' [ glm ] {
    services.vllm-station.download.models.glm53 = {
      include = [
        "*.safetensors"
        "*.json"
      ];
      sha256 = true;
      expectShards = 7;
      tokenFile = lib.mkForce null;
    };
  }) (
    config:
    let
      argv = startArgv config;
    in
    h.ok "--include twice in ${builtins.toJSON argv}" (lib.count (a: a == "--include") argv == 2)
    ++ h.contains "glob" argv "*.safetensors"
    ++ h.contains "sha256" argv "--sha256"
    ++ h.ok "explicit shards" (lib.elem "7" argv)
    ++ h.eq "no credential" ((dsc config).LoadCredential or [ ]) [ ]
    ++ h.ok "no token flag" (!lib.hasInfix "--token-file" (dsc config).ExecStart)
  );

  verify-only = h.check (with' [ glm ] {
    services.vllm-station.download.models.glm53.verifyOnly = true;
    services.vllm-station.download.expectations."nvidia/GLM-5.3-NVFP4".shards = 50;
  }) (
    config:
    h.eq "ExecStart: the stamp records what the copy is" (h.argv (dsc config).ExecStart) [
      station
      "verify"
      (revDir rev)
      "--repo"
      "nvidia/GLM-5.3-NVFP4"
      "--revision"
      rev
      "--expect-shards"
      "50"
    ]
    ++ h.eq "no network" (unitOf config).wants [ ]
    ++ h.eq "still NUMA-bound" (dsc config).NUMAPolicy "bind"
  );

  directory-and-user = h.check [ glm ] (
    config:
    h.contains "tmpfiles" config.systemd.tmpfiles.rules "d ${dir} 0755 vllm-station vllm-station - -"
    ++ h.eq "User" (dsc config).User "vllm-station"
    ++ h.contains "ReadWritePaths" (dsc config).ReadWritePaths dir
    ++ h.eq "system user" config.users.users.vllm-station.isSystemUser true
    ++ h.eq "not the serving unit's StateDirectory" ((dsc config) ? StateDirectory) false
  );

  # ---- the serving unit's stamp gate (serve.nix step 1), fed by this module ----
  serving-requires-stamp = h.check served (
    config:
    let
      u = h.unit config;
      pre = u.serviceConfig.ExecStartPre;
    in
    h.eq "first ExecStartPre is the stamp gate" (h.argv (builtins.head pre)) [
      linked
      "gate"
      "stamp"
      (revDir rev)
      "--revision"
      rev
      "--fix"
      "start vllm-station-download-glm53.service (it downloads and verifies), or run: station verify ${revDir rev}"
    ]
    ++ h.contains "wants the download (a start fetches a missing revision)" u.wants "vllm-station-download-glm53.service"
    # The first switch returns at once: the start does not wait for a download; it is skipped until the
    # stamp exists, and the download unit starts it when it is done.
    ++ h.lacks "not ordered after the download" u.after "vllm-station-download-glm53.service"
    ++ h.eq "skipped until the pinned revision is verified" u.unitConfig.ConditionPathExists "${revDir rev}/.station-verified.json"
    ++ h.eq "the download starts it, privileged, not waiting for it" (startsAfter config) [
      true
      "systemctl"
      "start"
      "--no-block"
      "vllm-station.service"
    ]
    # Not OnSuccess=: systemd fires it on a stop too, and the serving unit's Wants= would restart the download.
    ++ h.eq "no OnSuccess" ((unitOf config).unitConfig ? OnSuccess) false
    ++ h.eq "vLLM loads the revision's directory" (lib.head config.services.vllm-station.serve.vllmArgs) (revDir rev)
    ++ h.contains "read-only in the container, at the same path" (h.argv u.serviceConfig.ExecStart) "${revDir rev}:${revDir rev}:ro"
    ++ h.eq "preflight revision" (h.preflightJson config).revision rev
    ++ h.eq "preflight reads that directory" (h.preflightJson config).modelDir (revDir rev)
  );

  # Declared but not enabled: no unit is rendered, so the serving unit must not want one.
  serving-with-download-disabled = h.check (with' served { services.vllm-station.download.enable = lib.mkForce false; }) (
    config:
    h.eq "no download unit" (config.systemd.services ? vllm-station-download-glm53) false
    ++ h.lacks "wants no missing unit" (h.unit config).wants "vllm-station-download-glm53.service"
    ++ h.eq "the gate still runs, without a revision" (h.argv (builtins.head (h.unit config).serviceConfig.ExecStartPre)) [
      linked
      "gate"
      "stamp"
      dir
      "--fix"
      "run: station verify ${dir} (or declare services.vllm-station.download.models.<name>.dir = \"${dir}\")"
    ]
  );

  serving-local-model-without-download-unit = h.check [
    {
      services.vllm-station.serve = {
        enable = true;
        image = h.image;
        model = "/srv/models/x";
      };
    }
  ] (
    config:
    h.eq "stamp gate still first" (lib.take 4 (h.argv (builtins.head (h.unit config).serviceConfig.ExecStartPre))) [
      linked
      "gate"
      "stamp"
      "/srv/models/x"
    ]
  );

  serving-repo-id-needs-no-stamp = h.check [
    glm
    {
      services.vllm-station.serve = {
        enable = true;
        image = h.image;
        model = "org/model";
        allowHubDownload = true;
      };
    }
  ] (
    config:
    h.eq "only prestart" (lib.length (h.unit config).serviceConfig.ExecStartPre) 1
    ++ h.lacks "no download dependency" ((h.unit config).wants or [ ]) "vllm-station-download-glm53.service"
  );

  # The preset names the entry it serves from and fills in its repository.
  preset-fills-the-repository = h.check [
    {
      services.vllm-station = {
        serve = {
          enable = true;
          preset = "glm53-flash";
          image = h.image;
        };
        download = {
          enable = true;
          models.glm53-flash.revision = rev;
        };
      };
    }
  ] (
    config:
    let
      d = config.systemd.services.vllm-station-download-glm53-flash.serviceConfig;
    in
    h.eq "the download fetches the preset's repository" (lib.take 3 (h.argv d.ExecStart)) [
      station
      "download"
      "nvidia/GLM-5.3-Flash-NVFP4"
    ]
    ++ h.eq "the serving unit serves its pinned revision's directory" (lib.head config.services.vllm-station.serve.vllmArgs) "/var/lib/vllm-station-models/glm53-flash/revisions/${rev}"
    ++ h.contains "and wants it" (h.unit config).wants "vllm-station-download-glm53-flash.service"
    ++ h.eq "clients keep the preset's name" (h.flagValue "--served-model-name" config.services.vllm-station.serve.vllmArgs) "glm-5.3-flash"
  );

  assert-entry-without-repository = h.throws [
    {
      services.vllm-station.download = {
        enable = true;
        models.mine.revision = rev;
      };
    }
  ];

  # ---- station B copies from station A (the head's checkpoint share) ----
  copy-from-the-head = h.check (with' [ glm ] {
    services.vllm-station.download.models.glm53.copyFrom = "rsync://192.168.100.1:8730/glm53";
  }) (
    config:
    h.eq "ExecStart: station copy, pinned, bound to node 0" (h.argv (dsc config).ExecStart) [
      station
      "copy"
      "rsync://192.168.100.1:8730/glm53"
      "--dir"
      (revDir rev)
      "--revision"
      rev
      "--repo"
      "nvidia/GLM-5.3-NVFP4"
      "--membind"
      "0"
    ]
    ++ h.eq "NUMAPolicy" (dsc config).NUMAPolicy "bind"
    ++ h.eq "rsync on the unit's PATH" (map (p: p.name) (unitOf config).path) [ "rsync" ]
    ++ h.eq "no hub token for a copy" ((dsc config).LoadCredential or [ ]) [ ]
    ++ h.ok "network first" (lib.elem "network-online.target" (unitOf config).after)
  );

  copy-bandwidth-limit = h.check (with' [ glm ] {
    services.vllm-station.download.models.glm53 = {
      copyFrom = "rsync://192.168.100.1:8730/glm53";
      copyBandwidthLimit = "500M";
    };
  }) (config: h.eq "--bwlimit" (h.flagValue "--bwlimit" (h.argv (dsc config).ExecStart)) "500M");

  copy-bandwidth-limit-checked = h.throws (with' [ glm ] {
    services.vllm-station.download.models.glm53.copyBandwidthLimit = "fast";
  });

  assert-copy-from-needs-revision = h.assertionFails [
    {
      services.vllm-station.download = {
        enable = true;
        models.x = {
          model = "org/x";
          copyFrom = "rsync://10.0.0.1:8730/x";
          verifyOnly = true;
        };
      };
    }
  ] "needs the form rsync://HOST:PORT/MODULE, a pinned `revision`";

  assert-copy-from-form = h.assertionFails [
    (lib.recursiveUpdate glm { services.vllm-station.download.models.glm53.copyFrom = "10.0.0.1:/srv/glm53"; })
  ] "needs the form rsync://HOST:PORT/MODULE";

  # A `./hf-token` path literal would be copied into the world-readable store.
  assert-token-file-in-store = h.assertionFails [
    (lib.recursiveUpdate glm { services.vllm-station.download.models.glm53.tokenFile = "/nix/store/abc-hf-token"; })
  ] "tokenFile must be an absolute path outside the Nix store";

  assert-token-file-relative = h.assertionFails [
    (lib.recursiveUpdate glm { services.vllm-station.download.models.glm53.tokenFile = "hf-token"; })
  ] "tokenFile must be an absolute path outside the Nix store";

  sandbox-from-the-shared-base = h.check [ glm ] (
    config:
    let
      d = dsc config;
      base = (import ../../../modules/lib/hardening.nix).base;
    in
    h.eq "MemoryDenyWriteExecute" d.MemoryDenyWriteExecute true
    ++ h.eq "ProcSubset" d.ProcSubset "pid"
    ++ h.eq "PrivateUsers" d.PrivateUsers true
    ++ h.eq "UMask: the serving unit reads the files" d.UMask "0022"
    ++ h.eq "every base setting but UMask" (builtins.removeAttrs (builtins.intersectAttrs base d) [ "UMask" ]) (builtins.removeAttrs base [ "UMask" ])
  );

  # ---- revisions: R1 -> R2 -> R1 (an upgrade and its rollback) ----
  # Each pin renders its own directory, stamp condition and prune; the serving unit's text changes with
  # the pin (switch restarts it onto the new revision), and going back renders R1's units exactly again:
  # R1's stamp is still on disk (prune kept it), so its download unit is skipped and nothing is fetched.
  revisions-upgrade-and-rollback =
    let
      pinned = r: with' served { services.vllm-station.download.models.glm53.revision = lib.mkForce r; };
      view =
        r:
        let
          config = (h.eval (pinned r)).config;
          u = h.unit config;
          d = unitOf config;
        in
        {
          model = lib.head config.services.vllm-station.serve.vllmArgs;
          servingStart = u.serviceConfig.ExecStart;
          gate = h.argv (builtins.head u.serviceConfig.ExecStartPre);
          servingCondition = u.unitConfig.ConditionPathExists;
          downloadCondition = d.unitConfig.ConditionPathExists;
          downloadDir = h.flagValue "--dir" (startArgv config);
          # ExecStartPost: the prune, then starting the serving unit, in that order
          prune = map h.argv (lib.take 1 d.serviceConfig.ExecStartPost);
          pruneIgnoresFailure = map (lib.hasPrefix "-") (lib.take 1 d.serviceConfig.ExecStartPost);
          postSteps = map (l: lib.elemAt (h.argv l) 1) d.serviceConfig.ExecStartPost;
          adopt = map h.argv d.serviceConfig.ExecStartPre;
          starts = startsAfter config;
        };
      r1 = view rev;
      r2 = view rev2;
      back = view rev;
    in
    h.check served (
      _:
      h.eq "R1 serves its directory" r1.model (revDir rev)
      ++ h.eq "R2 serves its own" r2.model (revDir rev2)
      ++ h.eq "R2 is fetched beside R1" r2.downloadDir (revDir rev2)
      ++ h.eq "R2's download skipped once R2 is verified" r2.downloadCondition "!${revDir rev2}/.station-verified.json"
      ++ h.eq "the serving unit waits for R2's stamp" r2.servingCondition "${revDir rev2}/.station-verified.json"
      ++ h.eq "the gate checks R2" (lib.take 6 r2.gate) [
        linked
        "gate"
        "stamp"
        (revDir rev2)
        "--revision"
        rev2
      ]
      ++ h.ok "the serving unit's start changes with the pin (switch restarts it)" (r1.servingStart != r2.servingStart)
      ++ h.eq "after R2 verified: keep the pin and the newest, delete older" r2.prune [
        [
          station
          "revisions"
          "prune"
          dir
          "--pin"
          rev2
          "--keep"
          "2"
        ]
      ]
      ++ h.eq "a prune that fails does not fail the verified download" r2.pruneIgnoresFailure [ true ]
      ++ h.eq "prune first, then the serving unit is started" r2.postSteps [
        "revisions"
        "start"
      ]
      ++ h.eq "a flat checkpoint of before is adopted first" r2.adopt [
        [
          station
          "revisions"
          "adopt"
          dir
        ]
      ]
      ++ h.eq "the download starts the serving unit" (lib.drop 4 r2.starts) [ "vllm-station.service" ]
      ++ h.eq "back to R1: R1's units exactly" back r1
      ++ h.eq "R1's download is skipped while R1's stamp exists (no download)" back.downloadCondition "!${revDir rev}/.station-verified.json"
    );

  keep-revisions-option = h.check (with' [ glm ] { services.vllm-station.download.keepRevisions = 3; }) (
    config: h.eq "--keep" (h.flagValue "--keep" (h.argv (lib.head (dsc config).ExecStartPost))) "3"
  );

  keep-revisions-per-model = h.check (with' [ glm ] { services.vllm-station.download.models.glm53.keepRevisions = 1; }) (
    config: h.eq "--keep" (h.flagValue "--keep" (h.argv (lib.head (dsc config).ExecStartPost))) "1"
  );

  # Without a revision (a hand-synced copy, verify only) there is one directory: `dir` itself.
  verify-only-without-revision-is-flat = h.check (with' [ glm ] {
    services.vllm-station.download.models.glm53 = {
      verifyOnly = true;
      revision = lib.mkForce null;
    };
  }) (
    config:
    h.eq "verify DIR" (lib.take 3 (h.argv (dsc config).ExecStart)) [
      station
      "verify"
      dir
    ]
    ++ h.eq "no prune" ((dsc config).ExecStartPost or [ ]) [ ]
    ++ h.eq "no adopt" ((dsc config).ExecStartPre or [ ]) [ ]
    ++ h.eq "condition on dir's stamp" (unitOf config).unitConfig.ConditionPathExists "!${dir}/.station-verified.json"
  );

  # golive waits on the same condition as the serving unit (skipped at a first switch without a
  # checkpoint) and the download unit starts both once the revision is stamped.
  golive-follows-the-checkpoint = h.check (with' served { services.vllm-station.golive.enable = true; }) (
    config:
    h.eq "the download starts the serving unit and golive" (lib.drop 4 (startsAfter config)) [
      "vllm-station.service"
      "vllm-station-golive.service"
    ]
    ++ h.eq "golive skipped until the revision is stamped" config.systemd.services.vllm-station-golive.unitConfig.ConditionPathExists "${revDir rev}/.station-verified.json"
    ++ h.contains "golive after the serving unit" config.systemd.services.vllm-station-golive.after "vllm-station.service"
  );

  golive-without-download-has-no-condition = h.check [
    {
      services.vllm-station.serve = {
        enable = true;
        image = h.image;
        model = "/srv/models/x";
      };
      services.vllm-station.golive.enable = true;
    }
  ] (config: h.eq "no condition" (config.systemd.services.vllm-station-golive.unitConfig ? ConditionPathExists) false);

  # Not serving this entry: the download starts nothing.
  download-not-served-starts-nothing = h.check [ glm ] (
    config: h.eq "starts nothing" (startsAfter config) [ ]
  );

  # A local model no download unit produces: the gate refuses (exit 1, the fix), no condition skips it.
  serving-without-download-unit-is-not-skipped = h.check [
    {
      services.vllm-station.serve = {
        enable = true;
        image = h.image;
        model = "/srv/models/x";
      };
    }
  ] (config: h.eq "no ConditionPathExists" ((h.unit config).unitConfig ? ConditionPathExists) false);

  # ---- every assertion ----
  assert-branch-revision = h.assertionFails [
    (lib.recursiveUpdate glm { services.vllm-station.download.models.glm53.revision = "main"; })
  ] "\"main\" is not a 40-hex commit id";

  assert-revision-names-one-directory = h.assertionFails [
    (lib.recursiveUpdate glm {
      services.vllm-station.download.models.glm53 = {
        revision = "refs/pr/1";
        allowBranch = true;
      };
    })
  ] "cannot name a revision directory";

  branch-allowed = h.check [
    (lib.recursiveUpdate glm {
      services.vllm-station.download.models.glm53 = {
        revision = "main";
        allowBranch = true;
      };
    })
  ] (config: h.contains "--allow-branch" (startArgv config) "--allow-branch");

  assert-missing-revision = h.assertionFails [
    {
      services.vllm-station.download = {
        enable = true;
        models.x.model = "org/x";
      };
    }
  ] "a download needs a pinned revision";

  assert-relative-dir = h.assertionFails [
    (lib.recursiveUpdate glm { services.vllm-station.download.models.glm53.dir = "models/glm"; })
  ] "must be an absolute path";

  warning-gpu-node = h.check (with' [ glm ] { services.vllm-station.download.numaNodes = [ 1 ]; }) (
    config:
    h.ok "warns about node 1: ${builtins.toJSON config.warnings}" (
      lib.any (lib.hasInfix "includes node 1") config.warnings
    )
  );
}
