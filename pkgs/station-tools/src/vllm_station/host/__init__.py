"""Readers of the host: sysfs/proc under a root directory (`sysfs`), NVML (`nvml`), the container
runtime (`container`) and the libnuma binding (`numa`). No HTTP, no CLI."""
