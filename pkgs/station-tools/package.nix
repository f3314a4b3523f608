# The `station` operator tools as a Python application, and their test suite as a separate check.
# Version comes from pyproject.toml.
#
# What the units run is built from the sources alone (pyproject.toml, README.md, src/): a change to
# tests/ leaves it, and so every unit that names it, as it was. The suite runs in
# `passthru.tests.pytest`: the same build from the same sources plus tests/, with pytestCheckHook
# (real-vLLM and Nix tiers skip there with their reasons: no vLLM venv and no Nix inside the build
# sandbox). The flake's `checks.<system>.station-tools-tests` builds it.
{
  lib,
  python3Packages,
  numactl,
  rsync,
}:
let
  pyproject = lib.importTOML ./pyproject.toml;
  runtimeFiles = [
    ./pyproject.toml
    ./README.md
    ./src
  ];
  source =
    files:
    lib.fileset.toSource {
      root = ./.;
      fileset = lib.fileset.unions files;
    };

  station = python3Packages.buildPythonApplication {
    pname = "vllm-station";
    inherit (pyproject.project) version;
    pyproject = true;

    src = source runtimeFiles;

    build-system = [ python3Packages.setuptools ];

    dependencies = with python3Packages; [
      aiohttp
      cffi
      httpx
      huggingface-hub
      jsonschema
      matplotlib
      nvidia-ml-py
    ];

    # The sources hold no tests: the suite is `passthru.tests.pytest` (below).
    doCheck = false;

    # Pin libnuma so `station numa-exec`/`download` do not depend on the host's loader path.
    makeWrapperArgs = [
      "--set-default"
      "STATION_LIBNUMA"
      "${lib.getLib numactl}/lib/libnuma.so.1"
    ];

    # Runs with or without doCheck (a pre-dist phase).
    pythonImportsCheck = [ "vllm_station" ];

    passthru.tests.pytest = suite;

    meta = {
      description = "Operator tools for vLLM on NVIDIA DGX Station GB300: smoke, preflight, download, verify, bench";
      license = lib.licenses.mit;
      mainProgram = "station";
      platforms = lib.platforms.linux;
    };
  };

  # The same build with tests/ in its source and the suite run by pytestCheckHook against what it
  # installed (`$out/bin/station` is the wrapped console script, as the units run it).
  suite = station.overridePythonAttrs (old: {
    pname = "vllm-station-tests";
    src = source (runtimeFiles ++ [ ./tests ]);
    doCheck = true;

    # The tests write and read real checkpoints with safetensors' numpy API (hence numpy). Both are
    # check-only: `station verify` parses the documented header format itself, so the runtime closure
    # holds neither. safetensors' own test suite needs torch (and through it, hundreds of packages):
    # without `doCheck = false` this check would build or fetch torch just to run our tests.
    nativeCheckInputs =
      (with python3Packages; [
        hypothesis
        numpy
        pytestCheckHook
        pytest-timeout
        pytest-xdist
        (safetensors.overridePythonAttrs { doCheck = false; })
      ])
      # `station copy`'s tests run a real rsync daemon
      ++ [ rsync ];
    # One process: with pytest-xdist's setup hook (`--numprocesses=$NIX_BUILD_CORES`) tests that wait on
    # real servers and timeouts missed them beside each other on a loaded 2-core builder (two full checks,
    # a different test each time), and with its default `--dist load` a file's module fixture ran on
    # each worker.
    dontUsePytestXdist = true;
    # Not in the build: every command against every hostile server (100 forked runs, each asserting a
    # 150 s wall-clock deadline under an address-space cap). A builder's load is not a measurement: the
    # build skips wall-clock tests (`timing`) for the same reason; scripts/check runs this file. Nor the
    # rollouts (`station rollout` through stand-in hosts: chains of simulators, golive and wait-ready
    # runs, each step under a deadline; ~1-2 min of the build's time): scripts/check runs them too.
    disabledTestPaths = [
      "tests/test_hostile_all_commands.py"
      "tests/test_rollout.py"
    ];

    # tests/test_prestart.py runs the installed (wrapped) `station` console script
    preCheck = ''
      export STATION_LIBNUMA=${lib.getLib numactl}/lib/libnuma.so.1
      export HOME=$TMPDIR
      export PATH=$out/bin:$PATH
    '';

    passthru = (old.passthru or { }) // {
      tests = { };
    };
  });
in
station
