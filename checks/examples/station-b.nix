# Station B of the pair (rank 1, headless worker): see pair-station.nix.
import ./pair-station.nix { role = "worker"; }
