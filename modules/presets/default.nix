# Model recipes as data: preset name -> option values under `services.vllm-station`.
# `services.vllm-station.serve.preset = "<name>"` applies one with `lib.mkDefault` on every
# option it names, so any value can still be overridden with a plain definition.
{
  glm53-flash = import ./glm53-flash.nix;
  glm53-tp2 = import ./glm53-tp2.nix;
}
