# Helpers every Nix test tier shares (module tests, NixOS evaluations, VM tests, the system tier's
# renderer): one definition each.
{ lib }:
rec {
  # An Exec* value (utils.escapeSystemdExecArgs, maybe after a `+`/`-` prefix) back into its arguments.
  argv =
    line:
    let
      body = lib.removePrefix "-" (lib.removePrefix "+" line);
    in
    map (lib.replaceStrings [ "%%" "$$" ] [ "%" "$" ]) (
      builtins.fromJSON ("[" + lib.replaceStrings [ "\" \"" ] [ "\",\"" ] body + "]")
    );

  # The arguments after `marker` (a one-element list naming it when absent).
  after =
    marker: list:
    let
      idx = lib.lists.findFirstIndex (a: a == marker) null list;
    in
    if idx == null then [ "<${marker} not found>" ] else lib.drop (idx + 1) list;

  # The value after `flag` in an argument list (null when absent).
  flagValue =
    flag: list:
    let
      idx = lib.lists.findFirstIndex (a: a == flag) null list;
    in
    if idx == null then null else builtins.elemAt list (idx + 1);

  # Evaluation-only stand-ins (tests only, never in modules/): the offline tree lacks the Haskell
  # package set, and writeShellApplication and friends ask for shellcheck while evaluating.
  evaluationOnly = _final: prev: {
    shellcheck = prev.coreutils;
    shellcheck-minimal = prev.coreutils // {
      compiler = prev.coreutils // {
        meta.platforms = [ ];
      };
    };
  };
}
