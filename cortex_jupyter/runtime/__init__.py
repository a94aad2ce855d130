"""The runtime, in four subpackages read bottom to top: ``core``, ``scheduler``, ``loop``,
and the ``integrations`` beside them (each one's ``__init__`` lists its modules). This
module gathers their public names.

Consumes the parser's events while the stream is still arriving, starts each action the
moment its dependencies allow, and records everything on a ``Run``. Imports no IPython,
ipywidgets or openai.
"""

from cortex_jupyter.runtime.core.calls.registry import (
    AgentSpec,
    Registry,
    Step,
    ToolSpec,
    WorkflowSpec,
    default_registry,
    tool,
)
from cortex_jupyter.runtime.core.calls.relics import CacheRelic, data_dir, default_cache_path
from cortex_jupyter.runtime.core.errors import (
    ActionTimeout,
    AgentDepthExceeded,
    AgentDidNotAnswer,
    BadReference,
    CacheValueError,
    CortexError,
    CortexRuntimeError,
    InternalActionRefused,
    InvalidArguments,
    InvalidVariableName,
    NestedTooDeep,
    NoModelConfigured,
    NotVisible,
    RegistrationError,
    SchedulerNotRunning,
    ToolExited,
    TranscriptError,
    UnknownAction,
    UnknownFeed,
    UnknownVariable,
    WorkflowStepFailed,
)
from cortex_jupyter.runtime.core.events import (
    ActionOutput,
    ActionStatus,
    AnyEvent,
    ChatEntry,
    Chunk,
    End,
    Interrupt,
    Metric,
    Nested,
    Progress,
    RunEvent,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.model.client import Message, ModelClient
from cortex_jupyter.runtime.core.record.graph import (
    FINAL_STATUSES,
    STATUSES,
    ActionNode,
    Graph,
    Status,
)
from cortex_jupyter.runtime.core.record.run import (
    OutputRepr,
    Run,
    decode_event,
    dispatch_latencies,
    encode_event,
    load_events,
)
from cortex_jupyter.runtime.core.trust.scope import Scope
from cortex_jupyter.runtime.core.values.variables import (
    RESERVED_NAMES,
    check_variable_name,
    find_references,
    resolve,
)
from cortex_jupyter.runtime.integrations import executors as _executors  # noqa: F401 (plugs in)
from cortex_jupyter.runtime.integrations import tracing as _tracing  # noqa: F401 (plugs in)
from cortex_jupyter.runtime.loop.agent import Agent, RunHooks
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.feeds import (
    FeedError,
    FeedSet,
    FeedSourceFailed,
    FeedSpec,
    FeedUnavailable,
)
from cortex_jupyter.runtime.loop.prompt import describe_variables, format_results, system_prompt
from cortex_jupyter.runtime.loop.transcript import TurnRecord, continue_note, turns_of
from cortex_jupyter.runtime.loop.turns import Loop
from cortex_jupyter.runtime.scheduler.capture import progress
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler
from cortex_jupyter.runtime.scheduler.spec import InternalPolicy, RetryPolicy, RunSpec
from cortex_jupyter.runtime.scheduler.stream import parse_chunks, run_stream

__all__ = [
    "FINAL_STATUSES",
    "RESERVED_NAMES",
    "STATUSES",
    "ActionNode",
    "ActionOutput",
    "ActionStatus",
    "ActionTimeout",
    "Agent",
    "AgentDepthExceeded",
    "AgentDidNotAnswer",
    "AgentSpec",
    "AnyEvent",
    "BadReference",
    "CacheRelic",
    "CacheValueError",
    "ChatEntry",
    "Chunk",
    "Conversation",
    "CortexError",
    "CortexRuntimeError",
    "End",
    "FeedError",
    "FeedSet",
    "FeedSourceFailed",
    "FeedSpec",
    "FeedUnavailable",
    "Graph",
    "InternalActionRefused",
    "InternalPolicy",
    "Interrupt",
    "InvalidArguments",
    "InvalidVariableName",
    "Loop",
    "Message",
    "Metric",
    "ModelClient",
    "Nested",
    "NestedTooDeep",
    "NoModelConfigured",
    "NotVisible",
    "OutputRepr",
    "Progress",
    "RegistrationError",
    "Registry",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunHooks",
    "RunSpec",
    "Scheduler",
    "SchedulerNotRunning",
    "Scope",
    "Status",
    "Step",
    "ToolExited",
    "ToolSpec",
    "TranscriptError",
    "Turn",
    "TurnEnd",
    "TurnRecord",
    "UnknownAction",
    "UnknownFeed",
    "UnknownVariable",
    "WorkflowSpec",
    "WorkflowStepFailed",
    "check_variable_name",
    "continue_note",
    "data_dir",
    "decode_event",
    "default_cache_path",
    "default_registry",
    "describe_variables",
    "dispatch_latencies",
    "encode_event",
    "find_references",
    "format_results",
    "load_events",
    "parse_chunks",
    "progress",
    "resolve",
    "run_stream",
    "system_prompt",
    "tool",
    "turns_of",
]
