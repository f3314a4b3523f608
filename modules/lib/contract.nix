# Names and paths that more than one module (and the `station` tools) rely on: defined here once.
# The Python side defines the stamp name once too (vllm_station.checkpoint.STAMP_NAME); a test
# (checks/test_contracts.py) feeds what Nix renders through the Python readers to keep the two equal.
rec {
  # Where a client reaches an address the serving unit listens on: a wildcard on loopback, a bare IPv6
  # address in brackets (the wait-ready probe, monitoring's scrape and probe, golive).
  clientHost =
    host:
    if host == "0.0.0.0" || host == "" then
      "127.0.0.1"
    else if host == "::" || host == "[::]" then
      "[::1]"
    else if builtins.match ".*:.*" host != null && builtins.substring 0 1 host != "[" then
      "[${host}]"
    else
      host;

  # An address only this host reaches: what vLLM listens on unless its exposure is asked for, and how
  # the gateway and the station listener tell a local station from a remote one.
  isLoopback =
    host: builtins.substring 0 4 host == "127." || builtins.elem host [ "::1" "[::1]" "localhost" ];

  # The serving unit, and the container it runs (same name).
  unit = "vllm-station";
  # golive's oneshot (golive.nix); the download unit starts it with the serving unit (download.nix).
  goliveUnit = "${unit}-golive";
  stateDir = "/var/lib/${unit}";
  cacheDir = "/var/cache/${unit}";
  logsDir = "/var/log/${unit}";
  etcDir = "/etc/${unit}";

  # Secrets that outlive a reboot: root-only (0700, created by systemd-tmpfiles), on the persistent
  # disk; /run is a tmpfs that every boot empties. Option examples and docs name files here.
  secretsDir = "/var/lib/${unit}-secrets";
  # Each unit that loads secret files starts after its own check, `station secrets check --unit <unit>`
  # (modules/secrets.nix): a missing file fails that check with the option's name and the file's,
  # before systemd's `LoadCredential=` fails the unit itself with 243/CREDENTIALS.
  # The manifest is JSON, {"units": {"<unit>": [{"option", "path", "kind"}]}}; the Python side reads it
  # in vllm_station.commands.secrets (DEFAULT_MANIFEST, the same path, pinned by checks/test_nix_secrets.py).
  secretsManifest = "${etcDir}/secrets.json";
  secretsCheckUnit = consumer: "${unit}-secrets@${consumer}.service";

  # The `station` tools as the serving unit and golive run them: a link that serve.nix points at
  # services.vllm-station.package (systemd-tmpfiles `L+`, re-applied by every switch), so that a new
  # package changes no unit's text and restarts no engine (serve.nix's header says why and how).
  toolsLink = "/run/vllm-station-tools";
  stationAt = "${toolsLink}/bin/station";

  # `station preflight --config …`: written by serve.nix from `serve.preflight.settings`.
  preflightConfig = "${etcDir}/preflight.json";
  # The pair's environment: one file for the unit, its container and an operator's shell.
  pairEnvFile = "${etcDir}/pair.env";

  # Checkpoints live outside the serving unit's StateDirectory (see download.nix for why).
  modelsRoot = "/var/lib/vllm-station-models";
  downloadCacheDir = "/var/cache/vllm-station-download";
  downloadUnit = name: "vllm-station-download-${name}";
  # Fetches and verifies a download entry's `prefetch` revisions beside the served one (download.nix).
  prefetchUnit = name: "vllm-station-prefetch-${name}";
  # Written by `station verify` (and `station download`) into the checkpoint directory.
  stampName = ".station-verified.json";
  stampOf = dir: "${dir}/${stampName}";
  # Each pinned revision of a download entry lives in its own directory under the entry's `dir`, with
  # its own stamp, so that a new revision is fetched and verified beside the one being served and a
  # rollback finds the old one still there (vllm_station.checkpoint.revisions reads the same layout).
  revisionsDirName = "revisions";
  revisionDir = dir: revision: "${dir}/${revisionsDirName}/${revision}";

  # A headless pair worker's weights check (serve.nix): its engine loads only once the head has joined,
  # after its unit is active, so the check is a unit of its own, not a start step.
  weightsCheckUnit = "${unit}-weights-check";
  beaconUnit = "vllm-station-pair-beacon";
  # The worker's half of the pair's restart in the recipe's order (`station pair rejoin`, pair.nix): it
  # restarts the worker's serving unit once the head is down and the worker's session is over.
  rejoinUnit = "vllm-station-pair-rejoin";
  # Station A's verified checkpoint, read-only over the rail, for station B's copy unit (`station copy`).
  shareUnit = "vllm-station-checkpoint-share";
  shareConfig = "${etcDir}/rsyncd.conf";

  # Drain flags (`station drain`, vllm_station.drainflag has the same paths, pinned by a test): while
  # either exists, the gateway on this host and the station listener answer new requests, /health
  # included, with 503; requests in flight finish. The operator's flag persists (a station drained for
  # a reboot comes back drained); the stopping flag lies in the serving unit's RuntimeDirectory, written
  # by its first ExecStop step and removed by systemd when the stop is over.
  drainDir = "/var/lib/vllm-station-drain";
  drainFlag = "${drainDir}/drained";
  stoppingFlag = "/run/${unit}/stopping";

  # node_exporter's textfile collector reads *.prom here; `station probe`, `watchdog`, `prestart` and
  # `preflight` write them (vllm_station.textfile.DEFAULT_DIR is the same path, pinned by a test).
  textfileDir = "/var/lib/vllm-station-metrics";
}
