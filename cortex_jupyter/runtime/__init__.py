"""The runtime layer: the action graph, its scheduler, variables, registries and the run record.

Consumes the parser's events while the stream is still arriving, starts each action the
moment its dependencies allow, and records everything on a ``Run``. Imports no IPython,
ipywidgets or openai.
"""

from .errors import (
    ActionTimeout,
    AgentDepthExceeded,
    BadReference,
    CacheValueError,
    CortexRuntimeError,
    InternalActionRefused,
    InvalidArguments,
    InvalidVariableName,
    NoModelConfigured,
    RegistrationError,
    SchedulerNotRunning,
    TranscriptError,
    UnknownAction,
    UnknownFeed,
    UnknownVariable,
    WorkflowStepFailed,
)
from .events import ActionStatus, AnyEvent, End, Interrupt, Metric, Nested, RunEvent
from .graph import FINAL_STATUSES, STATUSES, ActionNode, Graph, Status
from .model import Message, ModelClient
from .record import OutputRepr, Run, decode_event, encode_event, load_events
from .registry import (
    AgentSpec,
    Registry,
    Step,
    ToolSpec,
    WorkflowSpec,
    default_registry,
    tool,
)
from .relics import CacheRelic, data_dir, default_cache_path
from .scheduler import (
    InternalPolicy,
    RetryPolicy,
    Scheduler,
    dispatch_latencies,
    parse_chunks,
    run_stream,
)
from .variables import RESERVED_NAMES, check_variable_name, find_references, resolve

__all__ = [
    "FINAL_STATUSES",
    "RESERVED_NAMES",
    "STATUSES",
    "ActionNode",
    "ActionStatus",
    "ActionTimeout",
    "AgentDepthExceeded",
    "AgentSpec",
    "AnyEvent",
    "BadReference",
    "CacheRelic",
    "CacheValueError",
    "CortexRuntimeError",
    "End",
    "Graph",
    "InternalActionRefused",
    "InternalPolicy",
    "Interrupt",
    "InvalidArguments",
    "InvalidVariableName",
    "Message",
    "Metric",
    "ModelClient",
    "Nested",
    "NoModelConfigured",
    "OutputRepr",
    "RegistrationError",
    "Registry",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "Scheduler",
    "SchedulerNotRunning",
    "Status",
    "Step",
    "ToolSpec",
    "TranscriptError",
    "UnknownAction",
    "UnknownFeed",
    "UnknownVariable",
    "WorkflowSpec",
    "WorkflowStepFailed",
    "check_variable_name",
    "data_dir",
    "decode_event",
    "default_cache_path",
    "default_registry",
    "dispatch_latencies",
    "encode_event",
    "find_references",
    "load_events",
    "parse_chunks",
    "resolve",
    "run_stream",
    "tool",
]
