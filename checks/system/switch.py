"""What `nixos-rebuild switch` does to units, for a station booted by this harness (the day2 tier).

NixOS's switch-to-configuration decides, for every unit that is active, whether a switch stops, restarts,
reloads, starts or leaves it. Its Perl script (nixos/modules/system/activation/switch-to-configuration.pl in
the 24.11 tree) and its Rust successor (pkgs/by-name/sw/switch-to-configuration-ng) cannot run here: they
need a built system (`$toplevel` with its `activate` script and `etc/`), /etc/NIXOS, the Perl modules
Config::IniFiles and File::Slurp and a D-Bus connection to the manager. This module IMPLEMENTS ITS
DOCUMENTED RULES instead, on the unit texts NixOS renders, so that a switch in a test restarts what a
real switch restarts and nothing else:

- Units are compared as ini data (`[Install]` ignored; an empty assignment clears the key), not as text.
  In `[Unit]`, a change to Description, Documentation, OnFailure, OnSuccess, OnFailureJobMode,
  IgnoreOnIsolate, StopWhenUnneeded, RefuseManualStart, RefuseManualStop, AllowIsolate, CollectMode or
  SourcePath changes nothing; a change to `X-Reload-Triggers` alone means *reload*; any other
  difference (restartTriggers render as `X-Restart-Triggers`, so they land here) means *changed*.
- A changed service with `X-ReloadIfChanged=true` (reloadIfChanged) is reloaded; one with
  `X-RestartIfChanged=false` (restartIfChanged = false), `RefuseManualStop` or `X-OnlyManualStart` is
  left running (skipped); one with `X-StopIfChanged=false` (stopIfChanged = false) is restarted after
  the activation; any other is stopped before the activation and started after it (a socket-activated
  service: its sockets instead).
- An active unit whose file the new configuration removed is stopped (unless `X-StopOnRemoval=false`);
  active targets are started again (that starts what became wanted), except those refusing manual starts.
- Units that were not active are left alone, except what the started targets now want.

The order is the script's: stop, activation (/etc, accounts, tmpfiles — which re-points
`/run/vllm-station-tools` at the new package), `systemctl daemon-reload`, reload, restart, start.
Mount, path, slice and socket units are outside this project and left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Unit = dict[str, dict[str, list[str]]]

# switch-to-configuration.pl, compare_units: [Unit] keys whose change restarts nothing
UNIT_SECTION_IGNORES = frozenset(
    {
        "X-Reload-Triggers",
        "Description",
        "Documentation",
        "OnFailure",
        "OnSuccess",
        "OnFailureJobMode",
        "IgnoreOnIsolate",
        "StopWhenUnneeded",
        "RefuseManualStart",
        "RefuseManualStop",
        "AllowIsolate",
        "CollectMode",
        "SourcePath",
    }
)
# Targets that cannot be restarted directly (handle_modified_unit)
FIXED_TARGETS = frozenset({"sysinit.target", "basic.target", "multi-user.target", "graphical.target"})

EQUAL, RESTART, RELOAD = 0, 1, 2


def parse_unit(text: str) -> Unit:
    """A unit file as switch-to-configuration reads it: section -> key -> values in order, [Install] left
    out, an empty assignment clearing what came before, `\\` continuation lines joined."""
    unit: Unit = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if "=" not in line or section == "Install" or not section:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if value == "":
            unit.get(section, {}).pop(key, None)
            continue
        unit.setdefault(section, {}).setdefault(key, []).append(value)
    return unit


def systemd_bool(unit: Unit, section: str, key: str, default: bool) -> bool:
    values = unit.get(section, {}).get(key, [])
    if not values:
        return default
    return values[-1] in ("1", "yes", "true", "on")


def compare_units(cur: Unit, new: Unit) -> int:
    """EQUAL, RESTART (the unit changed) or RELOAD (only X-Reload-Triggers changed)."""
    ret = EQUAL
    sections = set(new)
    for name, cur_keys in cur.items():
        if name not in new:
            if name == "Unit" and all(k in UNIT_SECTION_IGNORES for k in cur_keys):
                continue
            return RESTART
        sections.discard(name)
        new_keys = new[name]
        for key, value in cur_keys.items():
            if key not in new_keys:
                if name == "Unit" and key in UNIT_SECTION_IGNORES:
                    continue
                return RESTART
            if value != new_keys[key]:
                if name == "Unit" and key == "X-Reload-Triggers":
                    ret = RELOAD
                    continue
                if name == "Unit" and key in UNIT_SECTION_IGNORES:
                    continue
                return RESTART
        for key in set(new_keys) - set(cur_keys):
            if name != "Unit":
                return RESTART
            if key == "X-Reload-Triggers":
                ret = RELOAD
            elif key not in UNIT_SECTION_IGNORES:
                return RESTART
    if sections:
        if sections != {"Unit"}:
            return RESTART
        for key in new["Unit"]:
            if key not in UNIT_SECTION_IGNORES:
                return RESTART
            if key == "X-Reload-Triggers":
                ret = RELOAD
    return ret


@dataclass
class SwitchPlan:
    stop: set[str] = field(default_factory=set)
    start: set[str] = field(default_factory=set)
    restart: set[str] = field(default_factory=set)
    reload: set[str] = field(default_factory=set)
    skip: set[str] = field(default_factory=set)

    def touched(self) -> set[str]:
        """Units whose process the switch ends or signals (a target start ends nothing)."""
        return (self.stop | self.restart | self.reload) - {u for u in self.start if u.endswith(".target")}


def _handle_modified(name: str, new: Unit, plan: SwitchPlan, active: Mapping[str, str]) -> None:
    if name in FIXED_TARGETS or name.endswith((".path", ".slice", ".socket", ".mount")):
        return
    if systemd_bool(new, "Service", "X-ReloadIfChanged", False) and name not in plan.restart | plan.stop:
        plan.reload.add(name)
    elif (
        not systemd_bool(new, "Service", "X-RestartIfChanged", True)
        or systemd_bool(new, "Unit", "RefuseManualStop", False)
        or systemd_bool(new, "Unit", "X-OnlyManualStart", False)
    ):
        plan.skip.add(name)
    elif not systemd_bool(new, "Service", "X-StopIfChanged", True) or not name.endswith(".service"):
        plan.restart.add(name)
        plan.reload.discard(name)
    else:
        sockets = " ".join(new.get("Service", {}).get("Sockets", [])).split() or [
            name.rsplit(".", 1)[0] + ".socket"
        ]
        socket_activated = False
        for socket in sockets:
            if socket in active:
                plan.stop.add(socket)
                plan.start.add(socket)
                socket_activated = True
                plan.reload.discard(name)
        if not socket_activated:
            plan.start.add(name)
        plan.stop.add(name)
        plan.reload.discard(name)


def plan_switch(old: Mapping[str, str], new: Mapping[str, str], active: Mapping[str, str]) -> SwitchPlan:
    """What a switch from unit texts `old` to `new` does, given the units' ActiveState now (`active`)."""
    plan = SwitchPlan()
    for name, state in sorted(active.items()):
        if name not in old or state not in ("active", "activating"):
            continue
        cur = parse_unit(old[name])
        if name not in new:
            if systemd_bool(cur, "Unit", "X-StopOnRemoval", True):
                plan.stop.add(name)
            continue
        fresh = parse_unit(new[name])
        if name.endswith(".target"):
            refuses = systemd_bool(fresh, "Unit", "RefuseManualStart", False) or systemd_bool(
                fresh, "Unit", "X-OnlyManualStart", False
            )
            if not refuses:
                plan.start.add(name)
            if systemd_bool(fresh, "Unit", "X-StopOnReconfiguration", False):
                plan.stop.add(name)
            continue
        diff = compare_units(cur, fresh)
        if diff == RESTART:
            _handle_modified(name, fresh, plan, active)
        elif diff == RELOAD and name not in plan.restart:
            plan.reload.add(name)
    return plan


def run_switch(
    plan: SwitchPlan,
    systemctl: Callable[..., str],
    activate: Callable[[], None],
    is_active: Callable[[str], bool],
) -> None:
    """Carry out `plan` in switch-to-configuration's order. `activate` writes the new configuration (what
    NixOS's activation script does); `systemctl(*args)` runs systemctl in the machine."""
    if plan.stop:
        systemctl("stop", "--", *sorted(plan.stop), timeout=600)
    activate()
    systemctl("reset-failed", check=False)
    systemctl("daemon-reload")
    for unit in sorted(plan.reload):
        if not is_active(unit):  # a unit to reload that is not running is started instead
            plan.reload.discard(unit)
            plan.start.add(unit)
    if plan.reload:
        systemctl("reload", "--", *sorted(plan.reload), timeout=600)
    if plan.restart:
        systemctl("restart", "--", *sorted(plan.restart), timeout=900)
    if plan.start:
        systemctl("start", "--", *sorted(plan.start), timeout=900)
