# The `station` operator tools as a Python application.
# Version comes from pyproject.toml; the test suite runs in the build (real-vLLM and Nix tiers skip
# there with their reasons: no vLLM venv and no Nix inside the build sandbox).
{
  lib,
  python3Packages,
  numactl,
  rsync,
}:
let
  pyproject = lib.importTOML ./pyproject.toml;
in
python3Packages.buildPythonApplication {
  pname = "vllm-station";
  inherit (pyproject.project) version;
  pyproject = true;

  src = lib.fileset.toSource {
    root = ./.;
    fileset = lib.fileset.unions [
      ./pyproject.toml
      ./README.md
      ./src
      ./tests
    ];
  };

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

  # The tests write and read real checkpoints with safetensors' numpy API (hence numpy). Both are
  # check-only: `station verify` parses the documented header format itself, so the runtime closure
  # holds neither. safetensors' own test suite needs torch (and through it, hundreds of packages):
  # without `doCheck = false` this package's build would build or fetch torch just to run our tests.
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

  # Pin libnuma so `station numa-exec`/`download` do not depend on the host's loader path.
  makeWrapperArgs = [
    "--set-default"
    "STATION_LIBNUMA"
    "${lib.getLib numactl}/lib/libnuma.so.1"
  ];
  # tests/test_prestart.py runs the installed (wrapped) `station` console script
  preCheck = ''
    export STATION_LIBNUMA=${lib.getLib numactl}/lib/libnuma.so.1
    export HOME=$TMPDIR
    export PATH=$out/bin:$PATH
  '';

  pythonImportsCheck = [ "vllm_station" ];

  meta = {
    description = "Operator tools for vLLM on NVIDIA DGX Station GB300: smoke, preflight, download, verify, bench";
    license = lib.licenses.mit;
    mainProgram = "station";
    platforms = lib.platforms.linux;
  };
}
