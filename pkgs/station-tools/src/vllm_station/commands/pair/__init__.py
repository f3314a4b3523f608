"""`station pair`: the two-station ordering of services.vllm-station.pair (modules/pair.nix).

- `wait-worker`    the head's ExecStartPre: the worker's beacon answers /ready as a worker (order.py)
- `wait-head-stop` the worker beacon's ExecStop: the head stops first, bounded (order.py)
- `beacon`         the read-only HTTP beacon: /ready while the serving unit is active, /stamp (beacon.py)
"""
