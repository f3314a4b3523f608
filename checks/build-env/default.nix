# The package's inputs as `buildPythonApplication` receives them (tier build_env): what
# checks/test_build_env.py turns into a venv and a pytestCheckHook-like run. That run is the package's
# check, `passthru.tests.pytest` (the runtime package's source holds no tests/; package.nix says why).
# Builds nothing; evaluate with --read-write-mode so `src` (a lib.fileset source) is copied to the store.
#
#   nix-instantiate --eval --strict --json --read-write-mode checks/build-env \
#     --argstr nixosTree "$NIXOS_TREE" --argstr package "$PWD/pkgs/station-tools/package.nix"
#   … --arg drop '[ "safetensors" ]'   # the same package without these inputs (overridePythonAttrs)
#
# The arguments are read back through overridePythonAttrs rather than from the derivation: in 24.11
# mk-python-derivation.nix turns `nativeCheckInputs` into nativeInstallCheckInputs, merged into
# nativeBuildInputs, so only the arguments still hold it as given.
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  package,
  system ? "x86_64-linux",
  drop ? [ ],
}:
let
  pkgs = import nixosTree {
    inherit system;
    config = { };
    overlays = [ ];
  };
  inherit (pkgs) lib;

  pname = drv: drv.pname or (builtins.parseDrvName drv.name).name;
  pnames = map pname;
  keep = lib.filter (drv: !(lib.elem (pname drv) drop));

  # As the flake builds it: pkgs.callPackage (flake.nix, modules/default.nix); its suite is the check.
  runtime = pkgs.callPackage (/. + package) { };
  built = runtime.passthru.tests.pytest;
  pkg =
    if drop == [ ] then
      built
    else
      built.overridePythonAttrs (old: {
        dependencies = keep (old.dependencies or [ ]);
        nativeCheckInputs = keep (old.nativeCheckInputs or [ ]);
      });
  args =
    (pkg.overridePythonAttrs (old: {
      passthru = (old.passthru or { }) // {
        buildEnvArgs = old;
      };
    })).buildEnvArgs;
  versions = drvs: lib.listToAttrs (map (d: lib.nameValuePair (pname d) (d.version or "")) drvs);
in
{
  inherit (pkg) pname version;
  src = "${pkg.src}";
  dependencies = pnames (args.dependencies or [ ]);
  build-system = pnames (args.build-system or [ ]);
  nativeCheckInputs = pnames (args.nativeCheckInputs or [ ]);
  # the versions the build would check pyproject's specifiers against (pythonRuntimeDepsCheckHook)
  versions = versions ((args.dependencies or [ ]) ++ (args.build-system or [ ]));
  doCheck = args.doCheck or true;
  preCheck = args.preCheck or "";
  makeWrapperArgs = args.makeWrapperArgs or [ ];
  pythonImportsCheck = args.pythonImportsCheck or [ ];
  pytestFlagsArray = args.pytestFlagsArray or [ ];
  disabledTests = args.disabledTests or [ ];
  disabledTestPaths = args.disabledTestPaths or [ ];
  # pytest-xdist's setup hook (pytestXdistHook) adds --numprocesses=$NIX_BUILD_CORES unless this is set
  dontUsePytestXdist = args.dontUsePytestXdist or false;
  # store paths the check environment may name, by what stands in for them on this machine
  # what the units run: its source (no tests/) and whether it runs a suite itself
  runtime = {
    src = "${runtime.src}";
    doCheck = runtime.doInstallCheck;
  };
  storeLibs = {
    numactl = "${lib.getLib pkgs.numactl}/lib";
  };
}
