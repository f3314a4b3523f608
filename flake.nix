{
  description = "vllm-station: NixOS modules and operator tools that turn an NVIDIA DGX Station GB300 (or a pair) into a vLLM endpoint for GLM-5.3";

  inputs.nixpkgs.url = "github:nixos/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = lib.genAttrs systems;
      pkgsFor = system: nixpkgs.legacyPackages.${system};

      # `nix run .#NAME -- ARGS` runs `station NAME ARGS` (console scripts from pyproject.toml).
      appFor = system: name: description: {
        type = "app";
        program = "${self.packages.${system}.default}/bin/station-${name}";
        meta = { inherit description; };
      };

      example =
        system: file:
        lib.nixosSystem {
          modules = [
            self.nixosModules.default
            file
            { nixpkgs.hostPlatform = system; }
          ];
        };

      # Station images (docs/release.md): nixpkgs' own image machinery (`system.build.images`) on
      # each aarch64 example, unchanged, as `packages.aarch64-linux.<station>-<format>`.
      imageFormats = [
        "raw-efi"
        "iso-installer"
      ];
      stationImages = lib.concatMapAttrs (
        station: nixos:
        lib.listToAttrs (
          map (format: lib.nameValuePair "${station}-${format}" nixos.config.system.build.images.${format}) imageFormats
        )
      );
    in
    {
      nixosModules = {
        # Importing a module turns nothing on; each service has its own `enable`. The tools are built
        # from the system's own pkgs (modules/default.nix), so the module works with or without flakes.
        default = ./modules;
        serve = ./modules/serve.nix;
        host = ./modules/host.nix;
        download = ./modules/download.nix;
        pair = ./modules/pair.nix;
      };

      # The alert rules of services.vllm-station.monitoring with the recipe's thresholds, for any
      # Prometheus: `nix eval --json .#prometheusRules > vllm-station.rules.json` (JSON is YAML).
      prometheusRules = (import ./modules/monitoring/rules.nix).render { pair = true; };

      overlays.default = final: _prev: {
        vllm-station = final.callPackage ./pkgs/station-tools/package.nix { };
      };

      packages = forAllSystems (
        system:
        let
          station-tools = (pkgsFor system).callPackage ./pkgs/station-tools/package.nix { };
        in
        {
          inherit station-tools;
          default = station-tools;
        }
        // lib.optionalAttrs (system == "aarch64-linux") (
          stationImages { inherit (self.nixosConfigurations) flash-station station-a station-b; }
        )
      );

      apps = forAllSystems (system: {
        smoke = appFor system "smoke" "Go/no-go after every switch: model list, chat answer, get_weather tool call";
        preflight = appFor system "preflight" "Know before you start: NUMA page cache, GPU memory, checkpoint, disk, port";
        bench = appFor system "bench" "Go-live load test: concurrency sweep, burst, prefill";
        download = appFor system "download" "Download a pinned model revision bound to NUMA node 0, then verify it";
        default = appFor system "smoke" "Go/no-go after every switch";
      });

      devShells = forAllSystems (
        system:
        let
          pkgs = pkgsFor system;
        in
        {
          default = pkgs.mkShell {
            inputsFrom = [ self.packages.${system}.default ];
            packages = [
              pkgs.numactl
              pkgs.ruff
              pkgs.mypy
            ];
          };
        }
      );

      nixosConfigurations = {
        flash-station = example "aarch64-linux" ./checks/examples/flash-station.nix;
        station-a = example "aarch64-linux" ./checks/examples/station-a.nix;
        station-b = example "aarch64-linux" ./checks/examples/station-b.nix;
        cpu-station = example "x86_64-linux" ./checks/examples/cpu-station.nix;
        # flash-station behind the gateway (TLS, keys, allowlist, limits, three stations) and with monitoring
        gateway-station = example "aarch64-linux" ./checks/examples/gateway-station.nix;
        # station-b of gateway-station: vLLM on loopback behind a mutual-TLS listener open to the gateway only
        remote-station = example "aarch64-linux" ./checks/examples/remote-station.nix;
        monitored-station = example "aarch64-linux" ./checks/examples/monitored-station.nix;
      };

      checks = forAllSystems (
        system:
        import ./checks {
          inherit self system lib;
          pkgs = pkgsFor system;
        }
      );
    };
}
