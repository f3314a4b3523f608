"""The failure classes of the quality gates: one name per way a deployment can fail a case.

Two kinds:

* Serving faults (`SERVING_FAULTS`): the tool or reasoning parser, or the serving layer, breaks an answer
  the model got right. vLLM's GLM parsers have shipped each of them. `station simulate --tool-fault CLASS`
  reproduces each one, so the gates are proven to catch it (tests/test_gates_faults.py).
* Model faults: the model chose or filled the call wrongly (after BFCL's AST checker), or did not reach
  the task's goal (after τ-bench). A small or wrongly prompted model fails these; a parser bug should not.

Every failure a gate reports names one of these classes, its case and the case's category.
"""

from __future__ import annotations

# ---- serving faults (one simulator fault mode each) ------------------------------------------------
ZERO_ARG_DROPPED = "zero_arg_dropped"
EMPTY_ARGS_FLUSHED = "empty_args_flushed"
CUMULATIVE_DELTA = "cumulative_delta"
WRONG_STREAM_NAME = "wrong_stream_name"
REASONING_IN_CONTENT = "reasoning_in_content"
REASONING_IN_ARGUMENTS = "reasoning_in_arguments"
LONG_CONTEXT = "long_context"

# ---- other stream/plain disagreements --------------------------------------------------------------
STREAM_CALL_DROPPED = "stream_call_dropped"
STREAM_MISMATCH = "stream_mismatch"

# ---- model faults (BFCL-style AST checks) ----------------------------------------------------------
NO_CALL = "no_call"
UNEXPECTED_CALL = "unexpected_call"
WRONG_FUNCTION = "wrong_function"
WRONG_COUNT = "wrong_count"
INVALID_ARGUMENTS = "invalid_arguments"
MISSING_PARAM = "missing_param"
UNEXPECTED_PARAM = "unexpected_param"
WRONG_TYPE = "wrong_type"
WRONG_VALUE = "wrong_value"
NO_ANSWER = "no_answer"
ANSWER_MISSING_FACTS = "answer_missing_facts"

# ---- agent (τ-bench style) -------------------------------------------------------------------------
STATE_MISMATCH = "state_mismatch"
TURN_LIMIT = "turn_limit"

# ---- needle ----------------------------------------------------------------------------------------
NEEDLE_MISSED = "needle_missed"

# ---- the request itself ----------------------------------------------------------------------------
REQUEST_FAILED = "request_failed"

DESCRIPTIONS: dict[str, str] = {
    ZERO_ARG_DROPPED: "streamed: a zero-argument call is missing (finish_reason tool_calls, no delta)",
    EMPTY_ARGS_FLUSHED: "streamed: `{}` was flushed as the arguments of a call that has arguments",
    CUMULATIVE_DELTA: "streamed: an argument fragment repeats what came before (cumulative, not incremental)",
    WRONG_STREAM_NAME: "streamed: the tool name is wrong, truncated or sent more than once",
    REASONING_IN_CONTENT: "reasoning text leaked into the answer's content",
    REASONING_IN_ARGUMENTS: "reasoning text leaked into a tool call's arguments",
    LONG_CONTEXT: "retrieval or the call breaks only at long prompts (shorter ones pass)",
    STREAM_CALL_DROPPED: "streamed: a call with arguments is missing",
    STREAM_MISMATCH: "streamed and non-streamed answers disagree",
    NO_CALL: "no tool call where one was expected",
    UNEXPECTED_CALL: "a tool call where none was expected",
    WRONG_FUNCTION: "the wrong function was called",
    WRONG_COUNT: "the wrong number of calls",
    INVALID_ARGUMENTS: "the arguments are not a JSON object",
    MISSING_PARAM: "a required parameter is missing",
    UNEXPECTED_PARAM: "a parameter the case does not allow",
    WRONG_TYPE: "an argument does not match the tool's JSON schema",
    WRONG_VALUE: "an argument's value is not one of the accepted answers",
    NO_ANSWER: "no text answer where one was expected",
    ANSWER_MISSING_FACTS: "the final answer lacks a required fact",
    STATE_MISMATCH: "the environment's final state differs from the expected one",
    TURN_LIMIT: "the model was still calling tools when the turn limit was reached",
    NEEDLE_MISSED: "the needle was not retrieved",
    REQUEST_FAILED: "the request failed (HTTP, timeout, broken stream)",
}

SERVING_FAULTS: tuple[str, ...] = (
    ZERO_ARG_DROPPED,
    EMPTY_ARGS_FLUSHED,
    CUMULATIVE_DELTA,
    WRONG_STREAM_NAME,
    REASONING_IN_CONTENT,
    REASONING_IN_ARGUMENTS,
    LONG_CONTEXT,
)
