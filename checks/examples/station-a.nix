# Station A of the pair (rank 0, serves the API): see pair-station.nix.
import ./pair-station.nix { role = "head"; }
