"""checks/system/switch.py: switch-to-configuration's rules on small unit texts (tier unit).

The day2 tier's switch is an implementation of NixOS's rules (the script cannot run here: the module's
docstring says why). Each case is a rule of switch-to-configuration.pl, with unit texts in the form NixOS
renders them (restartTriggers as X-Restart-Triggers, reloadIfChanged as X-ReloadIfChanged, …).
"""

from __future__ import annotations

import pytest
from system.switch import (
    EQUAL,
    RELOAD,
    RESTART,
    compare_units,
    parse_unit,
    plan_switch,
    run_switch,
)

BASE = """[Unit]
Description=an engine
After=network.target
X-Restart-Triggers=/nix/store/aaaa-config
{unit_extra}
[Service]
ExecStart=/run/vllm-station-tools/bin/station serve
Restart=always
{service_extra}
[Install]
WantedBy=multi-user.target
"""


def unit(unit_extra: str = "", service_extra: str = "") -> str:
    return BASE.format(unit_extra=unit_extra, service_extra=service_extra)


def plan_of(old: str, new: str, state: str = "active", name: str = "e.service"):  # type: ignore[no-untyped-def]
    return plan_switch({name: old}, {name: new}, {name: state})


def test_parse_unit_reads_sections_lists_and_clearing() -> None:
    u = parse_unit("[Unit]\nAfter=a\nAfter=b\n[Service]\nEnvironment=X=1\nEnvironment=\nEnvironment=Y=2\n"
                   "ExecStart=/bin/x \\\n  --flag\n[Install]\nWantedBy=multi-user.target\n")  # fmt: skip
    assert u == {
        "Unit": {"After": ["a", "b"]},
        "Service": {"Environment": ["Y=2"], "ExecStart": ["/bin/x --flag"]},
    }


def test_same_text_restarts_nothing() -> None:
    p = plan_of(unit(), unit())
    assert not (p.stop | p.start | p.restart | p.reload | p.skip)


def test_a_changed_exec_line_stops_and_starts_the_service() -> None:
    p = plan_of(unit(), unit().replace("station serve", "station serve --new"))
    assert p.stop == {"e.service"} and p.start == {"e.service"} and not p.restart


def test_a_changed_restart_trigger_restarts() -> None:
    assert compare_units(parse_unit(unit()), parse_unit(unit().replace("aaaa", "bbbb"))) == RESTART


def test_description_and_install_changes_restart_nothing() -> None:
    new = unit().replace("an engine", "the engine").replace("multi-user.target", "default.target")
    assert compare_units(parse_unit(unit()), parse_unit(new)) == EQUAL
    assert not plan_of(unit(), new).touched()


def test_reload_triggers_alone_reload() -> None:
    old, new = unit("X-Reload-Triggers=/nix/store/k1"), unit("X-Reload-Triggers=/nix/store/k2")
    assert compare_units(parse_unit(old), parse_unit(new)) == RELOAD
    p = plan_of(old, new)
    assert p.reload == {"e.service"} and not (p.stop | p.restart)
    # added where there was none: a reload too
    assert plan_of(unit(), new).reload == {"e.service"}


def test_reload_triggers_with_another_change_restart() -> None:
    old = unit("X-Reload-Triggers=/nix/store/k1")
    new = unit("X-Reload-Triggers=/nix/store/k2").replace("aaaa", "bbbb")
    p = plan_of(old, new)
    assert p.stop == {"e.service"} and not p.reload


def test_reload_if_changed_reloads_instead_of_restarting() -> None:
    new = unit(service_extra="X-ReloadIfChanged=true").replace("aaaa", "bbbb")
    p = plan_of(unit(), new)
    assert p.reload == {"e.service"} and not (p.stop | p.restart | p.start)


def test_restart_if_changed_false_leaves_it_running() -> None:
    new = unit(service_extra="X-RestartIfChanged=false").replace("aaaa", "bbbb")
    p = plan_of(unit(), new)
    assert p.skip == {"e.service"} and not p.touched()


@pytest.mark.parametrize("extra", ["RefuseManualStop=yes", "X-OnlyManualStart=true"])
def test_units_refusing_manual_stop_are_skipped(extra: str) -> None:
    p = plan_of(unit(), unit(unit_extra=extra).replace("aaaa", "bbbb"))
    assert p.skip == {"e.service"} and not p.touched()
    # RefuseManualStop itself is one of the [Unit] keys whose change alone restarts nothing
    if extra.startswith("Refuse"):
        assert not plan_of(unit(), unit(unit_extra=extra)).touched()


def test_stop_if_changed_false_restarts_after_activation() -> None:
    new = unit(service_extra="X-StopIfChanged=false").replace("aaaa", "bbbb")
    p = plan_of(unit(), new)
    assert p.restart == {"e.service"} and not p.stop


def test_socket_activated_service_restarts_its_socket() -> None:
    old = unit()
    new = unit().replace("aaaa", "bbbb")
    p = plan_switch({"e.service": old}, {"e.service": new}, {"e.service": "active", "e.socket": "active"})
    assert p.stop == {"e.service", "e.socket"} and p.start == {"e.socket"}


def test_inactive_units_are_left_alone() -> None:
    assert not plan_of(unit(), unit().replace("aaaa", "bbbb"), state="inactive").touched()
    assert not plan_of(unit(), unit().replace("aaaa", "bbbb"), state="failed").touched()


def test_a_removed_unit_is_stopped_unless_it_says_otherwise() -> None:
    assert plan_switch({"e.service": unit()}, {}, {"e.service": "active"}).stop == {"e.service"}
    keep = unit("X-StopOnRemoval=false")
    assert not plan_switch({"e.service": keep}, {}, {"e.service": "active"}).stop


def test_active_targets_are_started_again() -> None:
    t = "[Unit]\nDescription=t\n"
    p = plan_switch({"multi-user.target": t}, {"multi-user.target": t}, {"multi-user.target": "active"})
    assert p.start == {"multi-user.target"} and not p.touched()


def test_a_new_unit_is_not_started_by_itself() -> None:
    p = plan_switch({}, {"n.service": unit()}, {})
    assert not (p.start | p.stop | p.restart)


def test_run_switch_keeps_the_scripts_order() -> None:
    calls: list[str] = []
    p = plan_switch(
        {"a.service": unit(), "b.service": unit(service_extra="X-StopIfChanged=false"),
         "c.service": unit("X-Reload-Triggers=1"), "multi-user.target": "[Unit]\n"},
        {"a.service": unit().replace("aaaa", "x"), "b.service": unit(service_extra="X-StopIfChanged=false ")
         .replace("aaaa", "x"), "c.service": unit("X-Reload-Triggers=2"), "multi-user.target": "[Unit]\n"},
        {"a.service": "active", "b.service": "active", "c.service": "active", "multi-user.target": "active"},
    )  # fmt: skip
    run_switch(
        p,
        systemctl=lambda *args, **_: calls.append(" ".join(args)) or "",
        activate=lambda: calls.append("activate"),
        is_active=lambda _unit: True,
    )
    assert calls == [
        "stop -- a.service",
        "activate",
        "reset-failed",
        "daemon-reload",
        "reload -- c.service",
        "restart -- b.service",
        "start -- a.service multi-user.target",
    ]
