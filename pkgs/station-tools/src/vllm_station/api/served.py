"""What the server serves, as every verb that needs a model reads it: the model to ask (`resolve_model`,
one rule for the exit codes) and its context length (`max_model_len`, held to `MAX_CONTEXT`).

`station smoke` and `station probe` report the same facts as a check of their own (`api.checks`'
`check_models`); the gates, golive and what composes them ask here.
"""

from __future__ import annotations

import logging

from vllm_station.api.client import ApiClient
from vllm_station.errors import CheckFailed, UsageError

# The longest max_model_len the gates build prompts for: twice GLM-5.3-Flash's full 1,048,576. A 90 % needle
# prompt at 4x that took the command past 256 MiB; a server reporting more is held to this.
MAX_CONTEXT = 2 * 1024 * 1024
log = logging.getLogger(__name__)


def resolve_model(api: ApiClient, want: str | None) -> str:
    """`want`, checked against /v1/models; without it, the only model served. A model the server does not
    list is the server's answer, not a bad argument: `CheckFailed` (exit 1); several models and no
    `want` is the operator's choice: `UsageError` (2) — as in every verb (docs/architecture.md)."""
    ids = [m.id for m in api.models()]
    if want is None:
        if len(ids) != 1:
            listed = ", ".join(ids) or "none"
            raise UsageError(f"the server lists {len(ids)} models ({listed}): choose one with --model")
        return ids[0]
    if want not in ids:
        raise CheckFailed(f"model {want!r} is not served; the server lists: {', '.join(ids) or 'none'}")
    return want


def max_model_len(api: ApiClient, model: str) -> int | None:
    """The server's max_model_len for `model`, held to MAX_CONTEXT (prompts are sized from it: a server
    claiming 10**12 must not make the needle gate build a 10**12-token prompt)."""
    reported = next((m.max_model_len for m in api.models() if m.id == model), None)
    if not isinstance(reported, int) or isinstance(reported, bool) or reported < 1:
        return None
    if reported > MAX_CONTEXT:
        log.warning(
            "the server reports max_model_len %s; the gates build prompts for at most %s tokens",
            f"{reported:,}", f"{MAX_CONTEXT:,}",
        )  # fmt: skip
        return MAX_CONTEXT
    return reported
