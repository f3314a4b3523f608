# The alert rules of a vllm-station, as data: a Prometheus rule file (`{ groups = [ … ]; }`) rendered from
# thresholds. modules/monitoring.nix feeds it to `services.prometheus.rules`; the flake's output
# `prometheusRules` is the same file with the defaults, for any Prometheus (`promtool check rules` reads
# its JSON, which is YAML). checks/monitoring/rules.test.yml holds a promtool test for every alert.
#
# The metrics, and where each comes from:
#   vllm:*                         vLLM's /metrics (job `vllmJob`); the names: ./metrics.json
#   node_systemd_*                 node_exporter's systemd collector (restart and start-time metrics on)
#   station_probe_*                `station probe` (a timer) through node_exporter's textfile collector
#   station_watchdog_*             `station watchdog`, same way
#   station_page_cache_*           `station prestart` / `station preflight`, same way
#   station_nccl_transport_verdict `station nccl-check` (a pair's head), same way
#   up                             Prometheus' own, per scrape job (the staleness rules)
#
# The watchdog's verdict labels (`verdict="wedged"`, …) are vllm_station.commands.watchdog.VERDICTS; a test
# (checks/test_monitoring_rules.py) feeds every label this file selects through that list.
let
  # vLLM's metric names: modules/monitoring/metrics.json, their one home (the dashboard and the
  # `station` tools are checked against it by checks/test_metric_names.py).
  vllm = builtins.mapAttrs (_: metric: metric.name) (builtins.fromJSON (builtins.readFile ./metrics.json)).vllm;
  num = builtins.toJSON; # 0.95 -> "0.95" (toString would give "0.950000")
  mins = m: "${toString m}m";
  secs = s: "${toString s}s";
in
rec {
  # The seed's figures (docs/monitoring.md says where each comes from); each is an option of
  # services.vllm-station.monitoring.thresholds.
  defaults = {
    tokensPerSecond = 100; # "alert when token throughput drops below 100 tok/s for one user"
    kvCacheUsage = 0.95; # KV cache above 95 % …
    kvCacheMinutes = 5; # … for 5 minutes
    waitingRequests = 0; # requests beyond --max-num-seqs 256 queue: any waiting …
    waitingMinutes = 3; # … for 3 minutes
    preemptions = 0; # preemptions in 5 minutes (the KV cache was too small for the batch)
    ttftSeconds = 5.0; # the probe's short-prompt TTFT (the seed: 0.061 s for one user, median 0.985 s at 32)
    overloadedMinutes = 5; # the watchdog's probe gets 429/503 for this long
    restartsPerHour = 1; # "alert on unexpected restart events"
    stallMinutes = 5; # requests wait and nothing moves for this long
    pageCacheGiB = 1.0; # FilePages left on the GPU's node after the drop ("close to zero")
  };

  render =
    {
      thresholds ? { },
      servingUnit ? "vllm-station.service",
      vllmJob ? "vllm-station",
      nodeJob ? "node",
      # every scrape job the station declares (the staleness rules: `up == 0`, `absent(up{job=…})`)
      scrapeJobs ? [
        vllmJob
        nodeJob
      ],
      probe ? true,
      probeIntervalSeconds ? 300,
      watchdog ? true,
      watchdogIntervalSeconds ? 30,
      wedgeVerdicts ? 3,
      pair ? false,
      # false: a headless pair worker (no API): only the unit's state, its restarts, the page cache, the
      # exporters and the worker's weights check (`weightsCheckUnit`) are judged there
      api ? true,
      weightsCheckUnit ? null,
    }:
    let
      t = defaults // thresholds;
      unit = ''name="${servingUnit}"'';
      probeFor = secs (2 * probeIntervalSeconds); # two probes in a row
      stall = mins t.stallMinutes;
      probeWindow = secs probeIntervalSeconds;
      # The vLLM job is judged with the unit's state (VllmStationEngineDown); the others here.
      otherJobs = builtins.filter (j: j != vllmJob) scrapeJobs;
      absentJobs = builtins.concatStringsSep " or " (map (j: ''absent(up{job="${j}"})'') scrapeJobs);
      watchdogStaleSeconds = 3 * watchdogIntervalSeconds;
      optional = cond: xs: if cond then xs else [ ];
      alert = name: severity: forTime: expr: summary: description: {
        inherit expr;
        alert = name;
        "for" = forTime;
        labels.severity = severity;
        annotations = { inherit summary description; };
      };
    in
    {
      groups = [
        {
          name = "vllm-station";
          rules =
            [
              (alert "VllmStationUnitFailed" "critical" "1m"
                ''node_systemd_unit_state{${unit},state="failed"} == 1''
                "${servingUnit} has failed"
                "systemd gave up on ${servingUnit} (its start limit, or a failed start step). journalctl -u ${servingUnit}; after the fix: systemctl reset-failed ${servingUnit}."
              )
              # A crash loop ends with the restart systemd refuses (StartLimitBurst). systemd 252 reports that
              # refusal as Result=start-limit-hit only for an explicit start (the watchdog's, an operator's);
              # refusing its own restart after a crash it keeps the crash's Result (signal, exit-code): the
              # unit is failed and NRestarts holds the restarts it made (measured under systemd 252:
              # failed / signal / NRestarts=3, checks/test_system_monitoring.py). A Restart=always unit is
              # left failed only once its restarts are refused, so failed with restarts is the start limit.
              (alert "VllmStationStartLimitHit" "critical" "0m"
                ''max by (instance) ((station_watchdog_unit_start_limit_hit == 1) or (node_systemd_unit_state{${unit},state="failed"} == 1 and on(instance, name) node_systemd_service_restart_total{${unit}} > 0))''
                "${servingUnit} hit its start limit (3 starts an hour)"
                "A crash or wedge loop: systemd refuses further starts (the unit is failed after its restarts). Restarts often mean the page-cache trap is back (see VllmStationPageCacheHigh). journalctl -u ${servingUnit}; after the fix: systemctl reset-failed ${servingUnit}."
              )
              (alert "VllmStationRestarts" "warning" "0m"
                ''(sum(increase(node_systemd_service_restart_total{${unit}}[1h])) or vector(0)) + (sum(increase(station_watchdog_restarts_total[1h])) or vector(0)) + (sum(increase(station_pair_rejoin_restarts_total[1h])) or vector(0)) >= ${num t.restartsPerHour}''
                "${servingUnit} restarted {{ $value | printf \"%.0f\" }} time(s) in the last hour"
                "Unexpected restarts (systemd's after a crash, the watchdog's after a wedge, a pair worker's rejoin after its head's). A spike often signals the page-cache trap re-appearing; the 4th start within the hour is refused."
              )
            ]
            ++ optional api [
              (alert "VllmStationEngineDown" "critical" "2m"
                ''up{job="${vllmJob}"} == 0 and on() node_systemd_unit_state{${unit},state="active"} == 1''
                "vLLM's /metrics does not answer while ${servingUnit} is active"
                "The serving unit counts as active but its server does not answer Prometheus."
              )
              (alert "VllmStationThroughputLow" "warning" probeFor
                "station_probe_tokens_per_second < ${num t.tokensPerSecond} and on() max(max_over_time(${vllm.running}[${probeWindow}])) <= 1 and on() max(max_over_time(${vllm.waiting}[${probeWindow}])) == 0"
                "One user gets {{ $value | printf \"%.1f\" }} tok/s (below ${num t.tokensPerSecond})"
                "The synthetic probe's decode rate dropped below the threshold in two probes in a row while the engine ran nothing else (at most 1 request running, none waiting, over each probe interval; the recipe expects 145.9 tok/s for one user): a potential memory issue."
              )
              (alert "VllmStationProbeFailing" "warning" probeFor "station_probe_success == 0"
                "The synthetic probe's generation fails"
                "station probe could not generate its fixed-length answer in two probes in a row: journalctl -u vllm-station-probe."
              )
              (alert "VllmStationToolCallFailing" "warning" probeFor "station_probe_tool_call_success == 0"
                "The synthetic probe's get_weather tool call fails"
                "Tool calls stopped working (parser, chat template or model): station smoke --base-url … shows the reason."
              )
              (alert "VllmStationProbeStale" "warning" "0m"
                "time() - station_probe_last_run_timestamp_seconds > ${num (3 * probeIntervalSeconds)}"
                "The synthetic probe has not run for {{ $value | printf \"%.0f\" }} s"
                "Its timer (vllm-station-probe.timer) should run it every ${toString probeIntervalSeconds} s."
              )
              (alert "VllmStationKvCacheFull" "warning" (mins t.kvCacheMinutes)
                "max(${vllm.kvCacheUsage}) > ${num t.kvCacheUsage}"
                "KV cache {{ $value | humanizePercentage }} full"
                "Above ${num t.kvCacheUsage} for ${mins t.kvCacheMinutes}: new requests wait or preempt running ones."
              )
              (alert "VllmStationRequestsWaiting" "warning" (mins t.waitingMinutes)
                "sum(${vllm.waiting}) > ${num t.waitingRequests}"
                "{{ $value }} requests waiting"
                "More requests than --max-num-seqs (or the KV cache) admits, for ${mins t.waitingMinutes}: plan capacity."
              )
              (alert "VllmStationPreemptions" "warning" "0m"
                "sum(increase(${vllm.preemptions}[5m])) > ${num t.preemptions}"
                "{{ $value | printf \"%.0f\" }} preemptions in 5 minutes"
                "Running requests were preempted for lack of KV cache: their work is recomputed."
              )
              (alert "VllmStationTtftHigh" "warning" probeFor
                "station_probe_ttft_seconds > ${num t.ttftSeconds}"
                "The probe's short prompt waits {{ $value | printf \"%.2f\" }} s for its first token"
                "Time to first token of the synthetic probe's short prompt above ${num t.ttftSeconds} s in two probes in a row. vLLM's TTFT histogram mixes every prompt length (a 1M-token prefill takes 35 s) and cannot be joined with the prompt length, so the probe's own fixed short prompt is judged."
              )
              (alert "VllmStationEngineStalled" "critical" "1m"
                "sum(${vllm.waiting}) > 0 and on() sum(increase(${vllm.generationTokens}[${stall}])) == 0 and on() sum(increase(${vllm.promptTokens}[${stall}])) == 0 and on() sum(changes(${vllm.kvCacheUsage}[${stall}])) == 0"
                "Requests wait and the engine makes no progress"
                "For ${stall} no token was generated or prefilled and the KV cache did not change while requests waited."
              )
              (alert "VllmStationEngineWedged" "critical" "0m" ''station_watchdog_verdict{verdict="wedged"} == 1''
                "The watchdog finds the engine wedged ({{ with query \"station_watchdog_wedge_streak\" }}{{ . | first | value }}{{ end }}/${toString wedgeVerdicts})"
                "/health answers but the 1-token probe times out or breaks (no 4xx, 429 or 503 answer) and /metrics shows no progress; the watchdog restarts ${servingUnit} after ${toString wedgeVerdicts} such looks in a row."
              )
              (alert "VllmStationProbeRefused" "critical" (secs (2 * watchdogIntervalSeconds))
                ''station_watchdog_verdict{verdict="misconfigured"} == 1''
                "The serving endpoint refuses the watchdog's probe (HTTP 4xx)"
                "An answer no restart changes: a stale or missing API key (401/403), a wrong model name or URL (404), a bad request (400). Clients are likely refused too. The watchdog does not restart for it; journalctl -u vllm-station-watchdog shows the answer."
              )
              (alert "VllmStationOverloaded" "warning" (mins t.overloadedMinutes)
                ''station_watchdog_verdict{verdict="overloaded"} == 1''
                "The serving endpoint sheds load (HTTP 429/503) for ${mins t.overloadedMinutes}"
                "The watchdog's 1-token probe gets 429 (a rate limit) or 503 (a full queue, a draining server): the engine lives, it is not restarted. Plan capacity or raise the limit; see VllmStationRequestsWaiting."
              )
            ]
            ++ optional (otherJobs != [ ]) [
              (alert "VllmStationScrapeDown" "warning" "2m"
                ''up{job=~"${builtins.concatStringsSep "|" otherJobs}"} == 0''
                "Prometheus cannot scrape {{ $labels.job }} ({{ $labels.instance }})"
                "The exporter does not answer: the alerts that read it (node_exporter: the unit's state, restarts, the probe's and the watchdog's textfiles) cannot fire. systemctl status prometheus-node-exporter."
              )
            ]
            ++ [
              (alert "VllmStationScrapeMissing" "warning" "5m" absentJobs
                "Prometheus has no target of job {{ $labels.job }}"
                "The scrape configuration lost a job the station's alerts read: nothing about it can fire. Check the Prometheus configuration (services.vllm-station.monitoring, or the central Prometheus that loads these rules)."
              )
            ]
            ++ optional probe [
              (alert "VllmStationProbeMissing" "warning" (secs (3 * probeIntervalSeconds))
                "absent(station_probe_last_run_timestamp_seconds)"
                "The synthetic probe has never reported"
                "No station-probe.prom for 3 probe intervals: the timer does not run it, it cannot write the textfile directory, or node_exporter does not read it. systemctl list-timers vllm-station-probe.timer; journalctl -u vllm-station-probe."
              )
            ]
            ++ optional watchdog [
              (alert "VllmStationWatchdogStale" "warning" "0m"
                "time() - station_watchdog_last_look_timestamp_seconds > ${num watchdogStaleSeconds}"
                "The watchdog has not looked for {{ $value | printf \"%.0f\" }} s"
                "It looks every ${toString watchdogIntervalSeconds} s: a wedge would go unrestarted. systemctl status vllm-station-watchdog."
              )
              (alert "VllmStationWatchdogMissing" "warning" (secs watchdogStaleSeconds)
                "absent(station_watchdog_last_look_timestamp_seconds)"
                "The watchdog has never reported"
                "No station-watchdog.prom: the watchdog does not run or cannot write the textfile directory, so a wedge would go unrestarted. systemctl status vllm-station-watchdog."
              )
            ]
            ++ [
              (alert "VllmStationPageCacheHigh" "warning" "0m"
                "station_page_cache_file_pages_bytes > ${num t.pageCacheGiB} * 2^30"
                "{{ $value | humanize1024 }}B of page cache on the GPU's NUMA node ({{ $labels.source }})"
                "FilePages of NUMA node {{ $labels.node }} (the GPU's HBM) after the drop: the page-cache trap. Bind bulk I/O to node 0 (station numa-exec --membind 0)."
              )
            ]
            ++ optional (weightsCheckUnit != null) [
              (alert "VllmStationWeightsCheckFailed" "critical" "0m"
                ''node_systemd_unit_state{name="${weightsCheckUnit}",state="failed"} == 1''
                "This rank does not hold its share of the weights"
                "station weights-check (${weightsCheckUnit}) found this rank's model-loading figure far from the checkpoint's share per rank (each GPU of the pair holds about half): tensor parallelism not applied, or a skewed split. journalctl -u ${weightsCheckUnit}."
              )
            ]
            ++ (
              if pair then
                [
                  (alert "VllmStationNcclTransport" "critical" "0m"
                    ''station_nccl_transport_verdict{verdict="fail"} == 1''
                    "NCCL is not on GPUDirect RDMA over the rail"
                    "station nccl-check failed on the head (socket fallback or an IB error): the pair serves ~10x slower. journalctl -u ${servingUnit} | grep NCCL."
                  )
                ]
              else
                [ ]
            );
        }
      ];
    };
}
